"""Tuning wall time on Ray with 1 and 2 CPU workers for the same budget:
the call users make (``tilefuse.tune(..., executor=RayExecutor(n))``),
median of repeated runs, workers started once per count.

    python benches/ray_workers.py [--trials 24] [--rep 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import ray

import tilefuse as tf
from tilefuse.distributed import RayExecutor


def softmax(rows: int, cols: int) -> tf.Fusion:
    return tf.workloads.get("softmax", rows=rows, cols=cols).payload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=24)
    p.add_argument("--rep", type=int, default=3)
    args = p.parse_args()
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    f = softmax(256, 1024)
    print(f"{platform.processor() or platform.machine()}, trials={args.trials}, rep={args.rep}")
    print("| workers | tune wall time (median) | trials/s | best |")
    print("|---|---|---|---|")
    for n in (1, 2):
        walls, best = [], []
        with RayExecutor(n) as ex:
            for seed in range(args.rep):
                start = time.perf_counter()
                r = tf.tune(f, executor=ex, trials=args.trials, seed=seed, cache=False)
                walls.append(time.perf_counter() - start)
                best.append(r.best_time)
        wall = statistics.median(walls)
        rate = args.trials / wall
        print(f"| {n} | {wall:.2f} s | {rate:.1f} | {statistics.median(best) * 1e3:.3f} ms |")


if __name__ == "__main__":
    main()
