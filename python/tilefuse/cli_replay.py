"""The strategy-replay commands of ``tilefuse``: ``record`` (measure every
point of a params space once) and ``replay`` (compare search strategies
on recordings, no device needed); :mod:`tilefuse.cli` registers them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from . import replay
from .cli_pipelines import command, device_argument, workload_arguments, workload_of_arguments
from .device import as_device

__all__ = ["add_commands"]

_out = Console()


def add_commands(sub: Any) -> None:
    """Registers ``record`` and ``replay`` on the subparsers."""
    r = command(
        sub,
        "record",
        "measure every point of a params space once, for replay",
        "Times every point of the tuner's space for a workload or a fusion JSON file "
        "(only the --field paths named: spaces grow fast) and writes the recording, "
        "which `tilefuse replay` and `tilefuse.tune(..., replay=...)` read instead of "
        "a device.",
        "tilefuse record softmax --size rows=256 --size cols=1024 --device gpu "
        "--field reduction_invocations --field rows_per_workgroup --out softmax.json",
    )
    workload_arguments(r, required=True)
    device_argument(r)
    r.add_argument("--field", action="append", metavar="PATH", help="a tunable field (repeat)")
    r.add_argument("--passes", type=int, default=1, help="each time the median of N passes")
    r.add_argument("--out", required=True, metavar="FILE", help="where the recording goes")
    r.add_argument("--quiet", action="store_true", help="no progress")
    r.set_defaults(run=_record)

    p = command(
        sub,
        "replay",
        "compare search strategies on recorded spaces",
        "Runs each strategy against each recording with seeds 0..N-1 and prints how many "
        "trials it took to get within the tolerance of the recorded best: the mean, the "
        "budget that gets nine seeds in ten there, and the seeds that got there within a "
        "tenth of the space; over several recordings, a last row per strategy sums them.",
        "tilefuse replay softmax.json --seeds 100 --strategy random --strategy surrogate",
    )
    p.add_argument("recordings", nargs="+", metavar="RECORDING", help="a `tilefuse record` file")
    p.add_argument("--strategy", action="append", choices=(*replay.STRATEGIES, "exhaustive"))
    p.add_argument("--seeds", type=int, default=10, help="seeds per strategy (default 10)")
    p.add_argument("--tolerance", type=float, default=0.05, help="how near the best (0.05: 5%%)")
    p.add_argument("--json", metavar="OUT", help="every seed's trials, as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress and no table")
    p.set_defaults(run=_replay)


def _record(args: argparse.Namespace) -> int:
    workload = workload_of_arguments(args)
    device = as_device(args.device)
    description = f"{workload.label} on {device.info['name']}"
    text = replay.record(
        workload.payload, device, args.field, args.passes, not args.quiet, description
    )
    Path(args.out).write_text(text)
    if not args.quiet:
        times = [t for _, t in json.loads(text)["times"]]
        ran = [t for t in times if t is not None]
        best = f", best {min(ran) * 1e3:.4g} ms" if ran else ""
        _out.print(f"{args.out}: {len(times)} points ({len(ran)} ran){best}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    strategies = args.strategy or list(replay.STRATEGIES)
    rows: list[tuple[str, replay.StrategyReplay]] = []
    with Progress(console=_out, transient=True, disable=args.quiet) as bar:
        for path in args.recordings:
            task = bar.add_task(Path(path).name)

            def advance(done: int, total: int, task: Any = task) -> None:
                bar.update(task, completed=done, total=total)

            text = Path(path).read_text()
            found = replay.compare(text, strategies, args.seeds, args.tolerance, advance)
            rows += [(path, r) for r in found]
    if args.json:
        document = [{"recording": p, **_as_dict(r)} for p, r in rows]
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    if not args.quiet:
        _out.print(_table(rows, args.seeds, args.tolerance))
    return 0


def _as_dict(r: replay.StrategyReplay) -> dict[str, Any]:
    return {
        "strategy": r.strategy,
        "points": r.points,
        "trials": list(r.trials),
        "mean": r.mean,
        "nine_in_ten": r.nine_in_ten,
        "within_tenth": r.within_tenth,
    }


def _table(rows: list[tuple[str, replay.StrategyReplay]], seeds: int, tolerance: float) -> Table:
    """One row per recording and strategy; over several recordings, one
    more per strategy summing them (how strategies compare over a corpus)."""
    t = Table(title=f"trials to within {tolerance:.0%} of the best, {seeds} seeds")
    for name in ("recording", "points", "strategy", "mean", "9 seeds in 10", "≤ 10% of space"):
        t.add_column(name, justify="left" if name in ("recording", "strategy") else "right")
    for path, r in rows:
        t.add_row(*_cells(Path(path).stem, [r]))
    if len({path for path, _ in rows}) > 1:
        t.add_section()
        for strategy in dict.fromkeys(r.strategy for _, r in rows):
            t.add_row(*_cells("all", [r for _, r in rows if r.strategy == strategy]))
    return t


def _cells(label: str, found: list[replay.StrategyReplay]) -> tuple[str, ...]:
    """A table row for one strategy's replays, summed over ``found``."""
    return (
        label,
        str(sum(r.points for r in found)),
        found[0].strategy,
        f"{sum(r.mean for r in found):.1f}",
        str(sum(r.nine_in_ten for r in found)),
        f"{sum(r.within_tenth for r in found)}/{sum(len(r.trials) for r in found)}",
    )
