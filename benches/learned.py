"""Learned heuristics against per-shape tuning, on held-out shapes.

    python benches/learned.py                                # softmax and row sums, CPU
    python benches/learned.py --family layernorm --size rows=256..8192 --size cols=128..4096
    python benches/learned.py --family matmul --size m=64..1024 --size n=256..1024 --size k=512
    python benches/learned.py --json benches/results/learned_local.json

For each family, every shape of the grid is tuned (``tilefuse.collect``,
quick effort, into a cache of this run's own), then a heuristic is
learned from a share of the shapes (``tilefuse.learn``) and timed on the
others (``--holdout``) beside their tuned winners and default heuristics.
The table gives per family the configs learned, the geometric mean of
tuned time / learned time over the held-out shapes (1: as fast as tuning
each shape), the worst held-out shape's learned time over its default's
(above 1: slower than the default), and the geometric-mean speedups over
the default of tuning and of the learned heuristic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tilefuse as tf

sys.path.insert(0, str(Path(__file__).parent))
from report import stamp, table


def one_family(family: str, sizes: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    found = tf.collect(family, sizes, args.device, effort=args.effort, seed=0, progress=False)
    collected = time.perf_counter() - start
    r = tf.learn(family, sizes, args.device, holdout=args.holdout, seed=0, progress=False)
    gains = r.gains or (None, None)
    row = {
        "family": family,
        "shapes": len(found),
        "held out": len(r.held_out),
        "configs": r.configs,
        "tuned / learned": r.tuned_over_learned,
        "worst learned / default": r.worst_over_default,
        "tuned speedup": gains[0],
        "learned speedup": gains[1],
        "collect s": collected,
        "learn s": time.perf_counter() - start - collected,
    }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", help="a workload (repeat; default two)")
    parser.add_argument(
        "--size",
        action="append",
        metavar="K=SPEC",
        help="a size axis, LO..HI or a list (repeat; default rows=256..4096, cols=128..2048)",
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--effort", default="quick", choices=["quick", "full"])
    parser.add_argument("--holdout", type=float, default=0.25)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--label", default="this machine", help="the machine's name in the report")
    args = parser.parse_args()
    os.environ["TILEFUSE_CACHE"] = tempfile.mkdtemp(prefix="tilefuse-learned-")
    families = args.family or ["softmax", "row_sum"]
    specs = args.size or ["rows=256..4096", "cols=128..2048"]
    grid = dict(spec.split("=", 1) for spec in specs)
    rows = [one_family(f, grid, args) for f in families]
    print(table(list(rows[0]), [list(row.values()) for row in rows]))
    if args.json:
        meta = {
            **stamp(),
            "device": args.device,
            "label": args.label,
            "grid": grid,
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
