"""Tuning wall time on Ray for the same budget: the call users make
(``tilefuse.tune(..., executor=RayExecutor(...))``), median of repeated
runs, workers started once per row.

    python benches/ray_workers.py [--trials 24] [--rep 3]   # 1 and 2 CPU workers
    python benches/ray_workers.py --gpu --threads 8         # GPU, CPU, both at once

With ``--gpu`` (a machine with a GPU) the rows are one GPU worker, one CPU
worker of ``--threads`` threads, and both in one run
(``devices="all"``: a winner per device fingerprint, tuned concurrently).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import ray

import tilefuse as tf
from tilefuse.distributed import RayExecutor, Worker


def softmax(rows: int, cols: int) -> tf.Fusion:
    return tf.workloads.get("softmax", rows=rows, cols=cols).payload


def rows(gpu: bool, threads: int) -> list[tuple[str, list[Worker]]]:
    """Each row's label and workers."""
    if not gpu:
        return [(f"{n} CPU x {threads} thread(s)", [Worker("cpu", threads)] * n) for n in (1, 2)]
    cpu, gpu_worker = Worker("cpu", threads), Worker("gpu")
    return [
        ("GPU", [gpu_worker]),
        (f"CPU x {threads} threads", [cpu]),
        (f"GPU + CPU x {threads} threads", [gpu_worker, cpu]),
    ]


def tune_row(f: tf.Fusion, workers: list[Worker], trials: int, rep: int) -> tuple[float, str]:
    """The median wall time of ``rep`` seeded runs, and each device's
    median best time."""
    walls: list[float] = []
    best: dict[str, list[float]] = {}
    with RayExecutor(workers) as ex:
        names = {d.fingerprint: d.info["name"] for d in ex.devices}
        for seed in range(rep):
            start = time.perf_counter()
            found = tf.tune(f, executor=ex, devices="all", trials=trials, seed=seed, cache=False)
            walls.append(time.perf_counter() - start)
            assert isinstance(found, dict)
            for fp, r in found.items():
                best.setdefault(names[fp], []).append(r.best_time)
    shown = ", ".join(f"{name} {statistics.median(t) * 1e3:.3f} ms" for name, t in best.items())
    return statistics.median(walls), shown


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=24, help="trials per device")
    p.add_argument("--rep", type=int, default=3)
    p.add_argument("--gpu", action="store_true", help="a GPU worker, a CPU worker, both")
    p.add_argument("--threads", type=int, default=1, help="threads of each CPU worker")
    p.add_argument("--size", type=int, nargs=2, default=(256, 1024), metavar=("ROWS", "COLS"))
    args = p.parse_args()
    cpus = max(2, args.threads + 1) if args.gpu else 2
    ray.init(num_cpus=min(cpus, os.cpu_count() or cpus), log_to_driver=False)
    f = softmax(*args.size)
    print(f"{platform.processor() or platform.machine()}, softmax {args.size[0]}x{args.size[1]}")
    print(f"trials={args.trials} per device, rep={args.rep}")
    print("| workers | tune wall time (median) | trials/s | best found (median) |")
    print("|---|---|---|---|")
    for label, workers in rows(args.gpu, args.threads):
        wall, best = tune_row(f, workers, args.trials, args.rep)
        kinds = len({w.device for w in workers})
        rate = args.trials * kinds / wall
        print(f"| {label} | {wall:.2f} s | {rate:.1f} | {best} |")


if __name__ == "__main__":
    main()
