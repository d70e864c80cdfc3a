"""Running a suite (``tilefuse bench``): every workload of the suite timed
on one engine, with its numpy form timed the same way for a speedup, shown
as a table and drawn as throughput against size with p20-p80 bands."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from .engine import BenchResult, Engine
from .pipeline import Pipeline
from .suite import Suite
from .timing import Budget
from .workload import Workload

__all__ = ["SCHEMA", "Baseline", "load_baseline", "plot", "run", "table"]

#: The JSON Schema of ``tilefuse bench --json``'s output, shipped with the package.
SCHEMA = Path(__file__).parent / "schemas" / "bench.schema.json"


def run(
    suite: Suite,
    engine: Engine,
    budget: Budget | None = None,
    numpy: bool = True,
    measure_what: str = "kernel",
    progress: Callable[[int, Workload], None] | None = None,
    pipeline: Pipeline | None = None,
) -> list[BenchResult]:
    """One verified :class:`BenchResult` per workload of ``suite``, in
    order, each built by ``pipeline`` where given (else with the params
    the heuristic cache or default heuristic gives); ``progress(index,
    workload)`` is called before each."""
    budget = budget or Budget()
    results = []
    for i, w in enumerate(suite.workloads):
        if progress is not None:
            progress(i, w)
        variant = suite.name if pipeline is None else f"{suite.name}/{pipeline.name}"
        r = engine.benchmark(
            w, pipeline=pipeline, variant=variant, budget=budget, measure=measure_what
        )
        if numpy and w.has_numpy:
            r = engine.with_numpy(r, w, budget)
        results.append(r)
    return results


#: An earlier run's results by ``(workload, measure)``: what
#: ``tilefuse bench --baseline`` compares with.
Baseline = dict[tuple[str, str], dict[str, Any]]


def load_baseline(path: str | Path) -> Baseline:
    """The results of an earlier ``tilefuse bench --json`` run."""
    try:
        document = json.loads(Path(path).read_text())
        return {(r["workload"], r["measure"]): r for r in document["results"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--baseline {path}: not the JSON of a tilefuse bench run ({e!r})") from e


def _against(r: BenchResult, base: dict[str, Any] | None, threshold: float) -> str:
    """The baseline's median over this one (above 1: faster now), marked
    faster or slower where it is off by over ``threshold`` and the two
    runs' p20-p80 bands are apart."""
    if base is None:
        return "-"
    ratio = base["median_s"] / r.median
    if ratio > 1 + threshold and r.p80 < base["p20_s"]:
        return f"{ratio:.2f}x faster"
    if ratio < 1 / (1 + threshold) and r.p20 > base["p80_s"]:
        return f"{ratio:.2f}x slower"
    return f"{ratio:.2f}x"


def table(
    results: Sequence[BenchResult],
    labels: Sequence[str],
    title: str,
    baseline: Baseline | None = None,
    threshold: float = 0.05,
) -> Table:
    """Time, throughput, share of peak and speedup over numpy per workload,
    and with a ``baseline``, the speed against it (see ``_against``)."""
    t = Table(title=title)
    peaks = any(r.peak for r in results)
    t.add_column("workload", overflow="fold", min_width=10)
    for column in ("median ms", "p20-p80 ms", "GFLOP/s", "GB/s", "% peak" * peaks, "vs numpy"):
        if column:
            # The band alone may fold: the other numbers are short.
            t.add_column(column, justify="right", overflow="fold", no_wrap=column != "p20-p80 ms")
    if baseline is not None:
        t.add_column("vs baseline", justify="right")
    for label, r in zip(labels, results, strict=True):
        share = r.fraction_of_peak
        peak = [f"{100 * max(share.values()):.0f}%" if share else "-"] if peaks else []
        speedup = "-" if r.speedup_over_numpy is None else f"{r.speedup_over_numpy:.2f}x"
        row = [_ms(r.median), f"{_ms(r.p20)}-{_ms(r.p80)}", f"{r.gflops:.3g}", f"{r.gbps:.3g}"]
        base = None if baseline is None else baseline.get((r.workload, r.measure))
        against = [] if baseline is None else [_against(r, base, threshold)]
        t.add_row(label, *row, *peak, speedup, *against)
    return t


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def plot(results: Sequence[BenchResult], path: str | Path, title: str) -> None:
    """GB/s (and GFLOP/s for compute-heavy workloads) against problem size,
    one line per workload name with its p20-p80 band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_name: dict[str, list[BenchResult]] = {}
    for r in results:
        by_name.setdefault(r.workload.split("(")[0], []).append(r)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for name, rs in by_name.items():
        rs = sorted(rs, key=lambda r: r.complexity.bytes)
        intensive = rs[0].complexity.intensity > 4  # matmuls: flops tell more than bytes
        x = [r.complexity.flops if intensive else r.complexity.bytes for r in rs]
        ax.plot(
            x,
            [_throughput(r, r.median, intensive) for r in rs],
            marker="o",
            label=f"{name} ({'GFLOP/s' if intensive else 'GB/s'})",
        )
        low = [_throughput(r, r.p80, intensive) for r in rs]
        ax.fill_between(x, low, [_throughput(r, r.p20, intensive) for r in rs], alpha=0.25)
    ax.set_xscale("log")
    ax.set_xlabel("problem size (bytes moved, or flops for compute-bound workloads)")
    ax.set_ylabel("throughput at the median (band: p20-p80)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _throughput(r: BenchResult, seconds: float, flops: bool) -> float:
    return r.complexity.gflops(seconds) if flops else r.complexity.gbps(seconds)
