"""Tuned against default: the five cases of ``run.py``, tuned on each device.

    python benches/tune.py                    # quick and full effort, CPU and GPU
    python benches/tune.py --quick-sizes      # run.py's --quick sizes
    python benches/tune.py --json tune.json
    python benches/tune.py --efforts quick --strategy surrogate
    python benches/tune.py --device gpu --case layernorm --launches 10,500 --json ln.json

For each case and device, ``tilefuse.tune`` runs at ``quick`` and at
``full`` effort (the cache untouched), then the default heuristic's kernel
and both winners are timed again side by side, interleaved round by round
(``Kernel.benchmark``, medians), so the speedups compare like with like.
A winner that changed nothing is the default's kernel and takes its time
(timing one kernel twice gave 1.02-1.04x on an H200, noise read as gain).
The table gives each tuning run's wall time and trials, the kernels' times
and the speedups over the default; ``quick / full`` is the share of full's
speedup that quick reaches (its gain over the default divided by full's).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import tilefuse as tf

sys.path.insert(0, str(Path(__file__).parent))
from report import stamp
from run import Case, cases


def tune_case(
    case: Case, device_name: str, device: tf.Device, args: argparse.Namespace
) -> dict[str, Any]:
    print(f"[{case.name}] {device_name}", file=sys.stderr, flush=True)
    f = case.fusion
    kernels = {"default": f.schedule(f.heuristics(device=device, cache=False), device)}
    row: dict[str, Any] = {"case": case.name, "device": device_name}
    for effort in args.efforts:
        # The workload, not its fusion: candidates are checked and timed on
        # the inputs the comparison below times them on.
        result = tf.tune(
            case.workload,
            device=device,
            effort=effort,
            strategy=args.strategy,
            cache=False,
            seed=0,
        )
        if result.changes:  # else the default won: the same kernel, not timed twice
            kernels[effort] = f.schedule(result.best_params, device)
        row[f"{effort} seconds"] = result.elapsed
        row[f"{effort} trials"] = len(result.trials)
        row[f"{effort} tuner speedup"] = result.speedup
        row[f"{effort} changes"] = result.changes  # in the JSON: what the winner changed
    budget = tf.timing.Budget(warmup=0.3, rep=0.2 * args.rounds)
    timed = tf.Engine(device).compare(case.workload, kernels, budget=budget, rounds=args.rounds)
    times = {name: r.median for name, r in timed.items()}
    times.update({e: times["default"] for e in args.efforts if e not in kernels})
    for name, t in times.items():
        row[f"{name} ms"] = t * 1e3
    for effort in args.efforts:
        row[f"{effort} speedup"] = times["default"] / times[effort]
    for launches in args.launches:
        for name, t in by_launches(kernels, case, launches, args.rounds).items():
            row[f"{name} ms, {launches} launches"] = t * 1e3
    if len(args.efforts) == 2:
        full_gain = row["full speedup"] - 1
        row["quick / full"] = (row["quick speedup"] - 1) / full_gain if full_gain > 0.01 else None
    return row


def by_launches(
    kernels: dict[str, tf.Kernel], case: Case, launches: int, rounds: int
) -> dict[str, float]:
    """Each kernel's median over `rounds` interleaved rounds of
    `Kernel.benchmark` with `launches` timed launches: the tuner times
    finalists in chunks of 10 launches, a comparison in hundreds (an H100
    layernorm winner led the tuner's final round and re-timed 0.9x the
    default)."""
    samples: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, k in kernels.items():
            samples[name].append(k.benchmark(*case.inputs, warmup=10, repeat=launches).median)
    return {name: statistics.median(s) for name, s in samples.items()}


def show(rows: list[dict[str, Any]], efforts: list[str]) -> None:
    table = Table(title="tuned vs default (Kernel.benchmark medians, interleaved)")
    columns = ["case", "device", "default ms"]
    for stat in ("ms", "speedup", "seconds", "trials"):
        columns += [f"{e} {stat}" for e in efforts]
        if stat == "speedup" and len(efforts) == 2:
            columns.append("quick / full")
    for c in columns:
        table.add_column(c, justify="left" if c in ("case", "device") else "right")
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            # three significant digits: GPU kernels take tenths of a millisecond
            cells.append("-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v))
        table.add_row(*cells)
    Console(width=200).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick-sizes", action="store_true", help="run.py's --quick sizes")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--device", choices=["cpu", "gpu", "both"], default="both")
    parser.add_argument("--case", help="only cases whose name contains this")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument(
        "--efforts", default="quick,full", help="comma-separated efforts to tune at, in order"
    )
    parser.add_argument(
        "--launches",
        default="",
        help="comma-separated launch counts: also time each kernel with Kernel.benchmark "
        "at each (in the JSON)",
    )
    parser.add_argument(
        "--strategy",
        choices=("random", "pattern", "surrogate", "exhaustive"),
        help="the search strategy (the tuner's default when omitted)",
    )
    args = parser.parse_args()
    args.efforts = args.efforts.split(",")
    args.launches = [int(n) for n in args.launches.split(",") if n]
    devices = {"cpu": tf.Device.cpu(), "gpu": tf.Device.gpu()}
    if args.device != "both":
        devices = {args.device: devices[args.device]}
    rows = []
    for case in cases(args.quick_sizes):
        if args.case and args.case not in case.name:
            continue
        for name, device in devices.items():
            rows.append(tune_case(case, name, device, args))
            show(rows[-1:], args.efforts)
    show(rows, args.efforts)
    if args.json:
        meta = {
            **stamp(),
            "strategy": args.strategy,
            "machine": platform.processor() or platform.machine(),
            "gpu": str(devices.get("gpu")),
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
