"""How well a tuning run's winner holds up when timed again.

    python benches/selection.py                      # 10 quick tunes per case, CPU
    python benches/selection.py --tunes 20 --device gpu
    python benches/selection.py --effort full --case "matmul 256^3 + bias + relu"
    python benches/selection.py --json selection.json

Small kernels are where timing noise decides: each case is tuned
``--tunes`` times (``tilefuse.tune``, quick effort unless ``--effort``,
seeds 0, 1, ..., the cache untouched), then the default heuristic's
kernel, the winner's and a
second kernel of the default's params are timed side by side
(``Engine.compare``, interleaved). Per case, the table gives the median
speedup the tuner claimed and the one timed again, how many winners were
over 3 % slower than the default when timed again, how many claimed over
3 % more than that, how many kept the default's params, and the noise
floor: how often the two kernels of the default's params differ by over
3 %. The matmul has a kernel 1.2x faster than the default's on the
CPU device: tunes that keep the default there missed it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import tilefuse as tf

CASES = {
    "softmax 128x256": ("softmax", {"rows": 128, "cols": 256}),
    "layernorm 256x256": ("layernorm", {"rows": 256, "cols": 256}),
    "column sum 256x512": ("column_sum", {"rows": 256, "cols": 512}),
    "softmax 512x1024": ("softmax", {"rows": 512, "cols": 1024}),
    "matmul 256^3 + bias + relu": (
        "matmul",
        {"m": 256, "n": 256, "k": 256, "epilogue": "bias_relu"},
    ),
}
OFF = 0.03  # what counts as a different time


def one_tune(
    w: tf.Workload, device: tf.Device, effort: str, seed: int, rounds: int
) -> dict[str, float]:
    r = tf.tune(w, device=device, effort=effort, cache=False, seed=seed, progress=False)
    f = w.fusion()
    default = f.heuristics(device=device, cache=False)
    kernels = {
        "default": f.schedule(default, device),
        "winner": f.schedule(r.best_params, device),
        "default again": f.schedule(default, device),
    }
    budget = tf.timing.Budget(warmup=0.1, rep=0.6)
    timed = tf.Engine(device).compare(w, kernels, budget=budget, rounds=rounds)
    t = {name: res.median for name, res in timed.items()}
    return {
        "claimed": r.speedup or 1.0,
        "timed": t["default"] / t["winner"],
        "control": t["default"] / t["default again"],
        "default kept": float(r.best_params == r.default_params),
        "seconds": r.elapsed,
    }


def summary(case: str, tunes: list[dict[str, float]]) -> dict[str, Any]:
    def median(key: str) -> float:
        return statistics.median(t[key] for t in tunes)

    return {
        "case": case,
        "claimed": median("claimed"),
        "timed": median("timed"),
        "slower": sum(t["timed"] < 1 - OFF for t in tunes),
        "overclaimed": sum(t["claimed"] > t["timed"] * (1 + OFF) for t in tunes),
        "default kept": sum(t["default kept"] == 1.0 for t in tunes),
        "noise": sum(abs(t["control"] - 1) > OFF for t in tunes),
        "tunes": len(tunes),
        "seconds": median("seconds"),
    }


def show(rows: list[dict[str, Any]], effort: str) -> None:
    table = Table(title=f"{effort} tunes timed again (medians; counts of tunes)")
    columns = [
        "case",
        "claimed",
        "timed",
        "slower",
        "overclaimed",
        "default kept",
        "noise",
        "tunes",
        "seconds",
    ]
    for c in columns:
        table.add_column(c, justify="left" if c == "case" else "right")
    for r in rows:
        table.add_row(*(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in columns))
    Console(width=160).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tunes", type=int, default=10, help="tuning runs per case")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--effort", choices=["quick", "full"], default="quick")
    parser.add_argument(
        "--case", action="append", choices=list(CASES), help="only these cases (repeatable)"
    )
    parser.add_argument("--json", help="also write every tune's numbers here")
    args = parser.parse_args()
    device = tf.Device.cpu() if args.device == "cpu" else tf.Device.gpu()
    rows, raw = [], {}
    for case in args.case or CASES:
        name, sizes = CASES[case]
        w = tf.workloads.get(name, **sizes)
        raw[case] = [
            one_tune(w, device, args.effort, seed, args.rounds) for seed in range(args.tunes)
        ]
        rows.append(summary(case, raw[case]))
        show(rows[-1:], args.effort)
    show(rows, args.effort)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "tunes": raw}, indent=1))


if __name__ == "__main__":
    main()
