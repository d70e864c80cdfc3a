"""The ``tilefuse`` command (also ``python -m tilefuse``): tune a fusion
saved as JSON (``Fusion.to_json()``) or a built-in workload, manage the
heuristic cache, run benchmarks and pipelines.

    tilefuse tune FUSION.json|WORKLOAD|--suite SUITE [--size K=V]... [--dtype f16|bf16]
                              [--device cpu|gpu]
                              [--effort quick] [--trials N]
                              [--seconds S] [--strategy NAME] [--seed N]
                              [--no-cache] [--json OUT] [--plot PNG]
                              [--executor ray [--address HOST:PORT] [--workers N]]
    tilefuse cache list | show ID | explain FUSION.json|WORKLOAD | export OUT
                 | merge OUT IN... | import BUNDLE | prune | clear | dir
    tilefuse bench SUITE.yaml|NAME [--device cpu|gpu] [--dtype f16|bf16] [--pipeline NAME]
                                   [--json OUT]
                                   [--csv OUT] [--plot PNG] [--measure kernel|call]
                                   [--baseline OLD.json [--threshold 0.05]]
    tilefuse run [PIPELINE] [--workload W] [--size K=V]... [--dtype f16|bf16]
                              [--set VAR=VALUE]...
    tilefuse inspect WORKLOAD [--size K=V]... [--dtype f16|bf16]
    tilefuse pipeline list | validate FILE... | show NAME|FILE
    tilefuse record FUSION.json|WORKLOAD --out FILE [--size K=V]... [--device cpu|gpu]
                                         [--field PATH]... [--passes N]
    tilefuse replay RECORDING... [--seeds N] [--strategy NAME]... [--tolerance T]
    tilefuse collect WORKLOAD --sizes K=LO..HI|K=A,B,... [--device cpu|gpu] [--effort quick]
                              [--trials N] [--seconds S] [--redo] [--json OUT]
                              [--executor ray [--address HOST:PORT] [--workers N]]
    tilefuse learn WORKLOAD --sizes K=LO..HI|K=A,B,... [--device cpu|gpu] [--holdout 0.25]
                            [--folds K] [--held-out K=V,K=V]... [--record|--replay JSON]
                            [--configs 8] [--tolerance 0.05] [--plot PNG]

``tilefuse COMMAND --help`` says what each does, with an example.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import cache
from ._native import TilefuseError
from .cli_collect import add_commands as add_collect_commands
from .cli_pipelines import (
    add_commands,
    command,
    device_argument,
    dtype_argument,
    ray_arguments,
    ray_executor,
    workload_arguments,
    workload_of_arguments,
)
from .cli_pipelines import pairs as _pairs
from .cli_replay import add_commands as add_replay_commands
from .device import Device, as_device
from .fusion import Fusion
from .suite import load_suite
from .suite import names as suites
from .tune import TuneResult, tune
from .workload import Workload
from .yamlfile import YamlError

__all__ = ["main"]

_out = Console()


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def _target(args: argparse.Namespace) -> Fusion | Workload:
    """The fusion file or the workload that WORKLOAD and ``--size`` name."""
    if Path(args.workload).is_file() and not args.size and not args.dtype:
        return Fusion.from_json(Path(args.workload).read_text())
    return workload_of_arguments(args)


def _tune_targets(args: argparse.Namespace) -> list[tuple[str, Fusion | Workload]]:
    """What to tune, labelled: a suite's workloads, or the one fusion file
    or workload named. A fusion file is tuned on random inputs, a workload
    on its own."""
    if (args.suite is None) == (args.workload is None):
        raise SystemExit("tilefuse tune: name a WORKLOAD or a --suite, not both")
    if args.suite is not None:
        if args.size:
            raise SystemExit("tilefuse tune: a suite's workloads have their own sizes")
        return [(w.key, w) for w in load_suite(args.suite, dtype=args.dtype).workloads]
    f = _target(args)
    return [(Path(args.workload).name if isinstance(f, Fusion) else f.key, f)]


def _tune(args: argparse.Namespace) -> int:
    targets = _tune_targets(args)
    options: dict[str, Any] = {
        "effort": args.effort,
        "strategy": args.strategy,
        "trials": args.trials,
        "seconds": args.seconds,
        "seed": args.seed,
        "cache": not args.no_cache,
        "progress": None if not args.quiet else False,
        "builtin_heuristics": not args.no_builtin_heuristics,
    }
    done: list[tuple[str, str, TuneResult]] = []
    failed: list[tuple[str, str]] = []
    with ray_executor(args) as ex:
        device = as_device(args.device) if ex is None else None
        for i, (label, f) in enumerate(targets):
            if not args.quiet and len(targets) > 1:
                _out.print(f"[{i + 1}/{len(targets)}] {label}")
            try:
                done += [(label, name, r) for name, r in _tuned(f, options, device, ex)]
            except TilefuseError as e:
                if args.suite is None:
                    raise
                failed.append((label, str(e)))  # a suite goes on
    for i, (_, _, r) in enumerate(done):
        if args.plot:
            r.plot(_nth(args.plot, i, len(done)))
    if args.suite is not None:
        _report_suite(args, done, failed)
        return int(bool(failed))
    for i, (label, device_name, r) in enumerate(done):
        if args.json:
            Path(_nth(args.json, i, len(done))).write_text(r.to_json(indent=2))
        if not args.quiet:
            _out.print(_result_table(r, f"{label} on {device_name}"))
    return 0


def _tuned(
    f: Fusion | Workload, options: dict[str, Any], device: Device | None, ex: Any
) -> list[tuple[str, TuneResult]]:
    """``f`` tuned on ``device``, or on the Ray executor ``ex``'s workers
    (one result per device fingerprint), with each device's name."""
    if device is not None:
        return [(device.info["name"], tune(f, device, **options))]
    named = {d.fingerprint: d.info["name"] for d in ex.devices}
    results = tune(f, executor=ex, devices="all", **options)
    return [(f"{named[fp]} ({fp})", r) for fp, r in results.items()]


def _report_suite(
    args: argparse.Namespace, done: list[tuple[str, str, TuneResult]], failed: list[tuple[str, str]]
) -> None:
    """A suite's results as one JSON list and one table, failures last."""
    if args.json:
        rows = [{"workload": w, "device": d, **json.loads(r.to_json())} for w, d, r in done]
        rows += [{"workload": w, "error": error} for w, error in failed]
        Path(args.json).write_text(json.dumps(rows, indent=2))
    if not args.quiet:
        title = f"{Path(args.suite).stem}: tuned against the default heuristic"
        _out.print(_suite_table(done, title))
    for label, error in failed:
        Console(stderr=True, soft_wrap=True).print(f"[red]{label} failed:[/red] {error}")


def _nth(path: str, i: int, n: int) -> str:
    """``path`` for the ``i``-th of ``n`` results: numbered when several."""
    if n == 1:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{i}{p.suffix}"))


def _changes(r: TuneResult) -> str:
    """The fields the winner changed from the default heuristic's, per
    segment when there are several."""
    each = r.changes if isinstance(r.changes, list) else [r.changes]
    lines = [
        ", ".join(f"{p} {json.dumps(a)} -> {json.dumps(b)}" for p, (a, b) in c.items())
        or "nothing: no candidate beat the default by 1 % in the final rounds"
        for c in each
    ]
    return lines[0] if len(lines) == 1 else "\n".join(f"{i}: {x}" for i, x in enumerate(lines))


def _result_table(r: TuneResult, title: str) -> Table:
    statuses = Counter(t.status for t in r.trials)
    applied = [f"{h['name']}{' (won)' if h['won'] else ''}" for h in r.heuristics]
    n = len(r.warm_start)
    warm = f"{n} cached winner{'' if n == 1 else 's'} of this structure"
    t = Table(title=title, show_header=False)
    t.add_column(style="bold")
    t.add_column()
    for name, value in [
        ("scheduler", str(r.scheduler)),
        ("strategy", r.strategy),
        ("trials", ", ".join(f"{n} {s}" for s, n in statuses.most_common())),
        ("default heuristic", _ms(r.default_time)),
        ("best", _ms(r.best_time) + _spread(r.best_samples)),
        ("speedup", "-" if r.speedup is None else f"{r.speedup:.2f}x"),
        ("changed", _changes(r)),
        ("seed heuristics", ", ".join(applied) or "none applied"),
        ("warm start", f"{warm}{' (won)' if r.warm_start_won else ''}"),
        ("tuning time", f"{r.elapsed:.1f} s"),
    ]:
        t.add_row(name, value)
    return t


def _spread(samples: list[float]) -> str:
    """The range of a final run's rounds, after its median."""
    if len(samples) < 2:
        return ""
    return f" ({_ms(min(samples))} to {_ms(max(samples))} over {len(samples)} rounds)"


def _suite_table(done: list[tuple[str, str, TuneResult]], title: str) -> Table:
    """One row a tuned workload, and what the winners changed most: where
    the default heuristic leaves time behind, and which fields to look at."""
    devices = {d for _, d, _ in done}
    t = Table(title=title)
    for column in ("workload", *(["device"] if len(devices) > 1 else [])):
        t.add_column(column, overflow="fold")
    for column in ("default ms", "best ms", "speedup"):
        t.add_column(column, justify="right")
    t.add_column("changed", overflow="fold")
    for column in ("trials", "s"):
        t.add_column(column, justify="right")
    changed: Counter[str] = Counter()
    for label, device_name, r in done:
        each = r.changes if isinstance(r.changes, list) else [r.changes]
        changed.update(path for c in each for path in c)
        t.add_row(
            label,
            *([device_name] if len(devices) > 1 else []),
            "-" if r.default_time is None else f"{r.default_time * 1e3:.4g}",
            f"{r.best_time * 1e3:.4g}",
            "-" if r.speedup is None else f"{r.speedup:.2f}x",
            _changes(r) if any(each) else "-",
            str(len(r.trials)),
            f"{r.elapsed:.1f}",
        )
    if changed:
        most = ", ".join(f"{path} ({n} of {len(done)})" for path, n in changed.most_common())
        t.caption = f"fields the winners changed: {most}"
    return t


def _entries_table(entries: list[dict[str, Any]], title: str) -> Table:
    """One row an entry (``tilefuse cache show`` has the rest), narrow
    enough for 80 columns."""
    t = Table(title=title)
    t.add_column("id", no_wrap=True)
    t.add_column("fusion", min_width=18)
    t.add_column("device", max_width=12)
    for column in ("best (speedup)", "origin"):
        t.add_column(column)
    for e in entries:
        key = e["key"]
        speedup = e["default_time"] / e["best_time"] if e.get("default_time") else None
        t.add_row(
            e["id"][:10],
            f"{key['scheduler']}: {e['signature'] or 'a fusion tuned before signatures'}",
            key["device"]["name"],
            _ms(e["best_time"]) + ("" if speedup is None else f"\n({speedup:.2f}x)"),
            e["origin"] + (" (stale)" if e["stale"] else ""),
        )
    if stale := sum(e["stale"] for e in entries):
        t.caption = (
            f"{stale} stale: tuned by an older tilefuse, never served (tilefuse cache prune)"
        )
    return t


def _cache(args: argparse.Namespace) -> int:
    if args.action == "list":
        found = cache.bundle_entries(args.bundle) if args.bundle else cache.entries()
        _out.print(_entries_table(found, args.bundle or str(cache.directory())))
    elif args.action == "show":
        matches = [e for e in cache.entries() if e["id"].startswith(args.id)]
        if len(matches) != 1:
            what = "no entry" if not matches else f"{len(matches)} entries"
            raise SystemExit(f"tilefuse cache show: {what} with an id starting {args.id!r}")
        _out.print_json(json.dumps(matches[0]))
    elif args.action == "explain":
        target = _target(args)
        fusion = target if isinstance(target, Fusion) else target.fusion()
        _out.print(cache.explain(fusion, as_device(args.device)))
    elif args.action == "export":
        _out.print(f"exported {cache.export(args.output)} entries to {args.output}")
    elif args.action == "merge":
        n = cache.merge(args.output, *args.inputs)
        _out.print(f"merged {len(args.inputs)} bundles into {args.output}: {n} entries")
    elif args.action == "import":
        stored, total = cache.import_bundle(args.bundle)
        _out.print(f"imported {stored} of {total} entries (the rest were here, measured or faster)")
    elif args.action == "prune":
        _out.print(f"removed {cache.prune()} stale entries from {cache.directory()}")
    elif args.action == "clear":
        _out.print(f"removed {cache.clear()} entries from {cache.directory()}")
    else:
        _out.print(cache.directory())
    return 0


def _bench(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from . import bench
    from .engine import Engine, to_csv
    from .pipeline import load_pipeline
    from .timing import Budget

    suite = load_suite(args.suite, dtype=args.dtype)
    baseline = bench.load_baseline(args.baseline) if args.baseline else None
    engine = Engine(as_device(args.device))
    pipeline = load_pipeline(args.pipeline, _pairs(args.set)) if args.pipeline else None
    budget = Budget(warmup=args.warmup, rep=args.rep)
    with Progress(console=_out, transient=True, disable=args.quiet) as bar:
        task = bar.add_task(suite.name, total=len(suite.workloads))

        def advance(done: int, w: Any) -> None:
            bar.update(task, completed=done, description=w.key)

        results = bench.run(
            suite, engine, budget, not args.no_numpy, args.measure, advance, pipeline
        )
    title = f"{suite.name} on {engine.device.info['name']} ({args.measure} time)"
    if not args.quiet:
        _out.print(
            bench.table(
                results, [w.label for w in suite.workloads], title, baseline, args.threshold
            )
        )
    if args.json:
        document = {"suite": suite.name, "results": [r.to_dict() for r in results]}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    if args.csv:
        Path(args.csv).write_text(to_csv(results))
    if args.plot:
        bench.plot(results, args.plot, title)
    return 0


def _cache_commands(actions: Any) -> None:
    """``tilefuse cache``'s actions, each with an example."""
    ls = command(
        actions,
        "list",
        "every entry (of the cache, or of --bundle)",
        "One row per entry: its id, what the fusion is and its scheduler, the device, the "
        "best time and its speedup, the origin (stale entries marked).",
        "tilefuse cache list --bundle shipped.json",
    )
    ls.add_argument("--bundle")
    command(
        actions,
        "show",
        "one entry as JSON",
        "The entry whose id starts with ID, params included.",
        "tilefuse cache show 3db64e28",
    ).add_argument("id")
    ex = command(
        actions,
        "explain",
        "why a lookup for a fusion hits or misses",
        "The entries nearest to the fusion's key, and which key fields differ.",
        "tilefuse cache explain softmax --size rows=4096 --device gpu",
    )
    workload_arguments(ex, required=True)
    device_argument(ex)
    command(
        actions,
        "export",
        "write the cache as a bundle",
        "One JSON file other machines import.",
        "tilefuse cache export winners.json",
    ).add_argument("output")
    mg = command(
        actions,
        "merge",
        "merge bundles (the faster entry per key)",
        "Writes OUTPUT with every entry of the inputs, the faster one where keys meet.",
        "tilefuse cache merge all.json a.json b.json",
    )
    mg.add_argument("output")
    mg.add_argument("inputs", nargs="+")
    command(
        actions,
        "import",
        "copy a bundle into the cache",
        "Copies its entries in, marked imported; an entry measured here, or a faster one, stays.",
        "tilefuse cache import winners.json",
    ).add_argument("bundle")
    command(
        actions,
        "prune",
        "remove the entries no lookup serves any more",
        "Removes the entries tuned by a tilefuse with an older params format or "
        "scheduler/codegen version (never served again, marked stale in the list), "
        "corrupt files set aside, and temporary files of writers that died.",
        "tilefuse cache prune",
    )
    command(actions, "clear", "remove every entry", "Empties the cache.", "tilefuse cache clear")
    command(
        actions,
        "dir",
        "print the cache directory",
        "The directory the cache lives in.",
        "tilefuse cache dir",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tilefuse", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = command(
        sub,
        "tune",
        "tune a fusion or a workload and cache the winner",
        "Searches the scheduler's params for the fastest that gives the reference's "
        "results, starting from the default heuristic and the seed heuristics, and keeps "
        "the winner in the heuristic cache; ends with a table of default and best times.",
        "tilefuse tune softmax --size rows=4096 --size cols=1024 --dtype bf16 --device gpu",
    )
    workload_arguments(t, required=True, nargs="?")
    t.add_argument(
        "--suite",
        help="tune every workload of a suite (a YAML file, or a shipped suite: "
        f"{', '.join(suites())}) instead, ending with one table of them all",
    )
    device_argument(t)
    t.add_argument("--effort", choices=("none", "quick", "full"), default="quick")
    t.add_argument("--strategy", choices=("random", "pattern", "surrogate", "exhaustive"))
    t.add_argument("--trials", type=int)
    t.add_argument(
        "--seconds", type=float, help="bound on the whole run, its final re-timing included"
    )
    t.add_argument("--seed", type=int)
    t.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    t.add_argument("--no-builtin-heuristics", action="store_true")
    t.add_argument(
        "--json",
        metavar="OUT",
        help="write the whole result, every trial, as JSON (a suite's: a list of them)",
    )
    t.add_argument("--plot", metavar="PNG", help="plot the best time against trials and seconds")
    t.add_argument("--quiet", action="store_true", help="no progress and no table")
    ray_arguments(t)
    t.set_defaults(run=_tune)

    c = command(
        sub,
        "cache",
        "the heuristic cache and bundles",
        "Lists, shows, explains, exports, merges, imports and clears the tuned winners "
        "that f.heuristics() serves (the user cache directory, or TILEFUSE_CACHE).",
        "tilefuse cache list",
    )
    actions = c.add_subparsers(dest="action", required=True)
    _cache_commands(actions)
    c.set_defaults(run=_cache)

    b = command(
        sub,
        "bench",
        "time a suite of workloads, with tables, JSON, CSV and plots",
        "Times every workload of a suite (a YAML file, or a shipped suite: "
        f"{', '.join(suites())}), verified against the reference, and its numpy form.",
        "tilefuse bench smoke --device cpu --dtype f16 --csv smoke.csv --plot smoke.png",
    )
    b.add_argument("suite", help="a suite file or the name of a shipped suite")
    device_argument(b)
    dtype_argument(b)
    b.add_argument(
        "--measure",
        choices=("kernel", "call"),
        default="kernel",
        help="time the kernel alone, or the call k(*arrays) a user makes",
    )
    b.add_argument("--pipeline", help="build each workload with this pipeline (file or name)")
    b.add_argument("--set", action="append", default=[], metavar="VAR=VALUE")
    b.add_argument("--warmup", type=float, default=0.1, help="seconds of warm-up per workload")
    b.add_argument("--rep", type=float, default=0.5, help="seconds of timed runs per workload")
    b.add_argument("--no-numpy", action="store_true", help="skip timing the numpy forms")
    b.add_argument("--json", metavar="OUT", help="every result, with all samples, as JSON")
    b.add_argument(
        "--baseline",
        metavar="OLD.json",
        help="an earlier run's --json: each workload's speed against it, marked faster or "
        "slower where it is off by over --threshold and the two runs' p20-p80 bands are apart",
    )
    b.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="the change --baseline marks (default 0.05: 5%%); on a shared machine, runs at "
        "different times can differ by more",
    )
    b.add_argument("--csv", metavar="OUT", help="one row per workload, full precision")
    b.add_argument("--plot", metavar="PNG", help="throughput against size with p20-p80 bands")
    b.add_argument("--quiet", action="store_true", help="no progress and no table")
    b.set_defaults(run=_bench)
    add_commands(sub)
    add_replay_commands(sub)
    add_collect_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    # What users get wrong (a file, a workload's name or sizes, params) is
    # one line; anything else is a bug and keeps its traceback.
    except (TilefuseError, YamlError, OSError, ValueError) as e:
        Console(stderr=True, soft_wrap=True).print(f"[red]tilefuse {args.command}:[/red] {e}")
        return 1
    except KeyboardInterrupt:
        Console(stderr=True).print(f"tilefuse {args.command}: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
