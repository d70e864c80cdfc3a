"""Records a corpus of tuning spaces for strategy replay: every point of
four tunable fields of each built-in workload at a few shapes, each point
the median of ``--passes`` exhaustive passes.

    python benches/record_spaces.py --device cpu --out benches/spaces
    python benches/record_spaces.py --device gpu --out benches/spaces --case softmax
    tilefuse replay benches/spaces/*.json --seeds 400

The table says how much each space leaves to find: its distinct kernels,
the default point's time over the best and how many points are within 5 %
of the best. A space whose default is within 5 % compares no strategies
(all stop at the first trial), and one where most points are within 5 %
is won by random search in two or three trials; ``--keep-informative``
writes only spaces whose default is over 5 % off the best.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

import tilefuse as tf

REDUCTION_CPU = [
    "launch.workgroup_size",
    "rows_per_workgroup",
    "vectorization_factor_reduction",
    "unroll_factor_reduction",
]
OUTER_REDUCTION_CPU = [
    "launch.workgroup_size",
    "rows_per_workgroup",
    "vectorization_factor_iteration",
    "unroll_factor_iteration",
]
REDUCTION_GPU = [
    "reduction_invocations",
    "rows_per_workgroup",
    "unroll_factor_reduction",
    "vectorization_factor_reduction",
]
POINTWISE = [
    "launch.workgroup_size",
    "vectorization_factor",
    "unroll_factor_inner",
    "unroll_factor_outer",
]
MATMUL = [
    "tile_sizes.cta_tile.m",
    "tile_sizes.cta_tile.n",
    "tile_sizes.cta_tile.k",
    "tile_sizes.instruction_tile.m",
    "tile_sizes.instruction_tile.n",
]

#: Shapes per device: lavapipe runs a point 10x to 50x slower than the
#: CPU device, so its shapes are smaller.
ROWS_COLS = {
    "cpu": [(8192, 256), (512, 8192), (2048, 2048), (4096, 128), (256, 4096), (1000, 1000)],
    "gpu": [(4096, 128), (256, 4096), (1000, 1000)],
}
CHAINS = {"cpu": [(1, 1 << 22), (256, 16384), (64, 65536)], "gpu": [(1, 1 << 20), (512, 2048)]}
MATMULS = {
    "cpu": [(256, 512, 512), (128, 1024, 256), (64, 512, 512), (200, 300, 100)],
    "gpu": [(128, 256, 256), (256, 128, 512)],
}

Case = tuple[str, str, dict[str, int], list[str]]


def cases(device: str, shapes: list[tuple[int, int]] | None = None) -> Iterator[Case]:
    """(file name, workload, sizes, fields) of every space on ``device``;
    the reductions at ``shapes`` (rows, columns) where given."""
    inner = REDUCTION_CPU if device == "cpu" else REDUCTION_GPU
    outer = OUTER_REDUCTION_CPU if device == "cpu" else REDUCTION_GPU
    for workload in ["softmax", "layernorm", "rmsnorm", "log_softmax", "row_sum", "column_sum"]:
        for rows, cols in shapes or ROWS_COLS[device]:
            fields = outer if workload == "column_sum" else inner
            yield (
                f"{workload}_{rows}x{cols}_{device}",
                workload,
                {"rows": rows, "cols": cols},
                fields,
            )
    for rows, cols in CHAINS[device]:
        yield f"chain_{rows}x{cols}_{device}", "chain", {"rows": rows, "cols": cols}, POINTWISE
    for m, n, k in MATMULS[device]:
        yield f"matmul_{m}x{n}x{k}_{device}", "matmul", {"m": m, "n": n, "k": k}, MATMUL


def landscape(recording: str) -> tuple[int, int, float, int]:
    """Points, distinct kernels (equal times), default / best and the
    points within 5 % of the best."""
    r = json.loads(recording)
    times = {tuple(p): t for p, t in r["times"]}
    ran = [t for t in times.values() if t is not None]
    best = min(ran)
    default = times[tuple(r["base"])] or float("inf")
    near = sum(t <= best * 1.05 for t in ran)
    return len(times), len(set(ran)), default / best, near


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--out", type=Path, required=True, help="directory for the recordings")
    ap.add_argument("--case", action="append", help="record only names containing this (repeat)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument(
        "--shape",
        action="append",
        type=lambda s: tuple(int(n) for n in s.split("x")),
        help="record the reductions at ROWSxCOLS instead of the device's shapes (repeat); "
        "a real GPU needs larger ones than lavapipe",
    )
    ap.add_argument(
        "--keep-informative", action="store_true", help="write only defaults over 5%% off"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = tf.Device.cpu() if args.device == "cpu" else tf.Device.gpu()
    table = Table("space", "points", "kernels", "default / best", "within 5 %", "written", "s")
    for name, workload, sizes, fields in cases(args.device, args.shape):
        if args.case and not any(c in name for c in args.case):
            continue
        start = time.perf_counter()
        fusion = tf.workloads.get(workload, **sizes).fusion()
        described = f"{workload} {sizes}, {args.device}"
        recording = tf.replay.record(fusion, device, fields, args.passes, description=described)
        points, kernels, ratio, near = landscape(recording)
        keep = ratio > 1.05 or not args.keep_informative
        if keep:
            (args.out / f"{name}.json").write_text(recording)
        seconds = time.perf_counter() - start
        print(f"{name}: {points} points, default / best {ratio:.3f}, {seconds:.0f} s", flush=True)
        table.add_row(
            name,
            str(points),
            str(kernels),
            f"{ratio:.3f}",
            str(near),
            "yes" if keep else "no",
            f"{seconds:.0f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
