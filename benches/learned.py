"""Learned heuristics against per-shape tuning, on held-out shapes.

    python benches/learned.py                                # softmax and row sums, CPU
    python benches/learned.py --family layernorm --size rows=256..8192 --size cols=128..4096
    python benches/learned.py --family matmul                # its own grid, see GRIDS
    python benches/learned.py --json benches/results/learned_local.json --record benches/families

For each family, every shape of the grid is tuned (``tilefuse.collect``,
quick effort, into a cache of this run's own), then a heuristic is
learned and judged by k-fold (``tilefuse.learn``, ``--folds``): each shape
held out once, its learned params' time beside its tuned winner's and
default heuristic's. ``--record DIR`` keeps each family's times as
``DIR/<family>_<device>.json``, which ``tilefuse learn --replay`` learns
from again without timing.
Seconds are split three ways: collection (tuning every shape) per shape;
timing every shape's winner at every shape, side by side, with the k-fold
evaluation; and learning proper, replayed from those times.
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
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tilefuse as tf
from tilefuse.timing import Budget, call_sampler, interleave

sys.path.insert(0, str(Path(__file__).parent))
from report import stamp, table

#: Grids of the families whose sizes are not rows and columns.
GRIDS = {"matmul": {"m": "64..1024", "n": "256..1024", "k": "512", "epilogue": "bias_relu"}}


def one_family(family: str, sizes: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    found = tf.collect(family, sizes, args.device, effort=args.effort, seed=0, progress=False)
    collected = time.perf_counter() - start
    # Without --record, the times go beside this run's own cache.
    folder = Path(args.record or os.environ["TILEFUSE_CACHE"])
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / f"{family}_{args.device}.json"
    r = tf.learn(
        family, sizes, args.device, folds=args.folds, seed=0, record=record, progress=False
    )
    timed = time.perf_counter() - start - collected
    # Learning proper (set cover, trees, every fold's lookups) from the
    # times just recorded: what ``tilefuse learn --replay`` spends.
    again = time.perf_counter()
    tf.learn(family, None, args.device, folds=args.folds, seed=0, replay=record, progress=False)
    learned = time.perf_counter() - again
    gains = r.gains or (None, None)
    hit, miss = lookup_us(family, found[0].sizes, args.device)
    row = {
        "family": family,
        "shapes": len(found),
        "folds": r.folds,
        "configs": r.configs,
        "tuned / learned": r.tuned_over_learned,
        "worst learned / default": r.worst_over_default,
        "tuned speedup": gains[0],
        "learned speedup": gains[1],
        "collect s / shape": collected / len(found),
        "time s": timed,
        "learn s": learned,
        "cache hit µs": hit,
        "learned µs": miss,
    }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def lookup_us(family: str, tuned: dict[str, Any], device: str) -> tuple[float, float]:
    """Median µs of ``f.heuristics()``, interleaved, at a tuned shape (a
    cache hit) and at that shape one larger along its first axis, which
    nobody tuned (the learned heuristic answers)."""
    first = next(iter(tuned))
    untuned = {**tuned, first: tuned[first] + 1}
    hit = tf.workloads.get(family, **tuned).payload
    miss = tf.workloads.get(family, **untuned).payload
    source = miss.params_source(device)
    if not source.startswith("learned"):
        raise SystemExit(f"{family} {untuned}: params from {source}, not the learned heuristic")
    samples = interleave(
        {
            "hit": call_sampler(lambda: hit.heuristics(device=device)),
            "miss": call_sampler(lambda: miss.heuristics(device=device)),
        },
        Budget(warmup=0.01, rep=0.05),
    )
    return statistics.median(samples["hit"]) * 1e6, statistics.median(samples["miss"]) * 1e6


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
    parser.add_argument("--folds", type=int, default=4, help="k of k-fold (default 4)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--record", metavar="DIR", help="keep each family's times here")
    parser.add_argument("--label", default="this machine", help="the machine's name in the report")
    args = parser.parse_args()
    os.environ["TILEFUSE_CACHE"] = tempfile.mkdtemp(prefix="tilefuse-learned-")
    families = args.family or ["softmax", "row_sum"]
    specs = args.size or ["rows=256..4096", "cols=128..2048"]
    given = dict(spec.split("=", 1) for spec in specs)
    grids = [given if args.size else GRIDS.get(f, given) for f in families]
    if any(g != grids[0] for g in grids):
        parser.error("families of different grids run one at a time (see GRIDS)")
    grid = grids[0]
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
