"""What warm start is worth: quick tunes of one size, cold and started from
the cached winner of another size of the same workload.

    python benches/warm_start.py                   # chain, softmax, layernorm on the CPU
    python benches/warm_start.py --device gpu --seeds 5 --case softmax

For each case the donor size is tuned at ``full`` effort into a cache of its
own: its winner is what warm start has to offer. Then, for each seed, the
target size is tuned at ``quick`` effort twice: cold (an empty cache) and
warm (a copy of the donor's cache, so no run sees another's winner). The
default kernel and every winner are timed again interleaved
(``Engine.compare``) so the speedups compare like with like. The table gives
medians over the seeds: the quick run's wall time, the trials it took to
first reach its winner, and the winner's speedup over the default.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import tilefuse as tf

#: name: (workload, donor sizes, target sizes)
CASES: dict[str, tuple[str, dict[str, int], dict[str, int]]] = {
    "chain": ("chain", {"rows": 2048, "cols": 2048}, {"rows": 1024, "cols": 1024}),
    "softmax": ("softmax", {"rows": 4096, "cols": 1024}, {"rows": 1024, "cols": 1024}),
    "layernorm": ("layernorm", {"rows": 4096, "cols": 1024}, {"rows": 1024, "cols": 1024}),
}


@contextmanager
def cache_at(directory: Path) -> Iterator[None]:
    """``TILEFUSE_CACHE`` set to ``directory`` for the block."""
    old = os.environ.get("TILEFUSE_CACHE")
    os.environ["TILEFUSE_CACHE"] = str(directory)
    try:
        yield
    finally:
        if old is None:
            del os.environ["TILEFUSE_CACHE"]
        else:
            os.environ["TILEFUSE_CACHE"] = old


def trials_to_best(r: tf.TuneResult) -> int:
    """1 + the index of the first trial that proposed the winner."""
    best = r.best_params
    assert isinstance(best, tf.HeuristicParams)
    return 1 + next(i for i, t in enumerate(r.trials) if t.params == best.to_dict())


def quick(w: tf.Workload, device: tf.Device, seed: int, cache: Path) -> tf.TuneResult:
    with cache_at(cache):
        return tf.tune(w, device, effort="quick", seed=seed, progress=False)


def bench_case(name: str, device: tf.Device, seeds: int, rounds: int, work: Path) -> dict[str, Any]:
    kind, donor_sizes, target_sizes = CASES[name]
    donor = tf.workloads.get(kind, **donor_sizes)
    target = tf.workloads.get(kind, **target_sizes)
    donated = work / f"{name}-donor"
    with cache_at(donated):
        tf.tune(donor, device, effort="full", seed=0, progress=False)
    f = target.payload
    kernels: dict[str, Any] = {
        "default": f.schedule(f.heuristics(device=device, cache=False), device)
    }
    runs: dict[str, list[tf.TuneResult]] = {"cold": [], "warm": []}
    for seed in range(seeds):
        for how, results in runs.items():
            cache = work / f"{name}-{how}-{seed}"
            if how == "warm":
                shutil.copytree(donated, cache)
            r = quick(target, device, seed, cache)
            results.append(r)
            kernels[f"{how} {seed}"] = f.schedule(r.best_params, device)
    budget = tf.timing.Budget(warmup=0.3, rep=0.2 * rounds)
    timed = tf.Engine(device).compare(target, kernels, budget=budget, rounds=rounds)
    default = timed["default"].median
    row: dict[str, Any] = {"case": f"{name} {target.key}", "donor": donor.key}
    for how, results in runs.items():
        speedups = [default / timed[f"{how} {s}"].median for s in range(seeds)]
        row[f"{how} s"] = statistics.median(r.elapsed for r in results)
        row[f"{how} trials to best"] = statistics.median(trials_to_best(r) for r in results)
        row[f"{how} speedup"] = statistics.median(speedups)
    row["warm won"] = f"{sum(r.warm_start_won for r in runs['warm'])}/{seeds}"
    return row


def show(rows: list[dict[str, Any]], seeds: int) -> None:
    table = Table(title=f"quick tuning, cold vs warm start (medians of {seeds} seeds)")
    columns = ["case", "donor"]
    for how in ("cold", "warm"):
        columns += [f"{how} s", f"{how} trials to best", f"{how} speedup"]
    columns.append("warm won")
    for c in columns:
        table.add_column(c, justify="left" if c in ("case", "donor") else "right")
    for r in rows:
        table.add_row(*(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in columns))
    Console(width=200).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    args = parser.parse_args()
    device = tf.Device.cpu() if args.device == "cpu" else tf.Device.gpu()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.case or list(CASES):
            rows.append(bench_case(name, device, args.seeds, args.rounds, Path(work)))
            show(rows[-1:], args.seeds)
    show(rows, args.seeds)


if __name__ == "__main__":
    main()
