"""Params that a device once ran 10x to 1000x slower than its defaults.

    python benches/params_cliffs.py                 # CPU device
    python benches/params_cliffs.py --device gpu --budget 1

A tuner measures every point of its space, so a point that is merely a bad
choice should cost about what a good one does, not seconds: each case here
is one that did (matmuls: split-k, staged operands, swizzled grids, ragged
tiles, skinny shapes; rows: workgroups wider than a row). Prints the call
`k(*arrays)` (median over a time budget, after one warm-up call) beside
the workload's numpy form in the same run, and the ratio; every result is
first checked against the float64 reference.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import tilefuse as tf

# 256-row workgroup tiles of 16-column invocations (a GPU's shape).
WIDE_TILES: dict[str, Any] = {
    "tile_sizes.cta_tile.m": 256,
    "tile_sizes.cta_tile.n": 128,
    "tile_sizes.warp_tile.n": 32,
    "tile_sizes.instruction_tile.n": 16,
}
STAGED: dict[str, Any] = {"async_gmem_load_operands": True}


def tile(name: str, m: int, n: int, k: int) -> dict[str, int]:
    """The fields of one of `tile_sizes`' tiles."""
    return {f"tile_sizes.{name}.{dim}": size for dim, size in zip("mnk", (m, n, k), strict=True)}


# 32 x 32 tiles of 8 x 8 invocations of 4 x 4 x 4 (the demo's edited params).
SMALL_INVOCATIONS: dict[str, Any] = {
    **tile("cta_tile", 32, 32, 16),
    **tile("warp_tile", 32, 32, 16),
    **tile("instruction_tile", 4, 4, 4),
}
# A fuzzed point: 256-row tiles in 2 warps, split k, a grid swizzled by 8.
SWIZZLED_SPLIT_K: dict[str, Any] = {
    "tile_sizes.cta_tile.m": 256,
    "tile_sizes.cta_tile.n": 16,
    "tile_sizes.warp_tile.m": 128,
    "tile_sizes.warp_tile.n": 16,
    "tile_sizes.warp_tile.k": 64,
    "tile_sizes.instruction_tile.n": 16,
    "tile_sizes.instruction_tile.k": 8,
    "splitk_factor": 4,
    "grid_swizzle_factor": 8,
    "use_smem_epilogue": True,
}

# 512 invocations a row of 64, 16 rows a workgroup, across invocations.
WIDE_ROW_REDUCTION: dict[str, Any] = {
    "launch.workgroup_size": None,
    "persistent_kernel": False,
    "cross_invocation_inner_reduction": True,
    "reduction_invocations": 512,
    "rows_per_workgroup": 16,
}

# (name, workload, its sizes, params fields set over the defaults)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("256^3, splitk_factor 2", "matmul", {"m": 256, "n": 256, "k": 256}, {"splitk_factor": 2}),
    ("8x256x16384, defaults", "matmul", {"m": 8, "n": 256, "k": 16384}, {}),
    ("1x4096x4096, defaults", "matmul", {"m": 1, "n": 4096, "k": 4096}, {}),
    ("4x512x8192, defaults", "matmul", {"m": 4, "n": 512, "k": 8192}, {}),
    ("64x256x256, staged", "matmul", {"m": 64, "n": 256, "k": 256}, STAGED),
    ("256^3 B^T, staged", "matmul", {"m": 256, "n": 256, "k": 256, "transpose_b": True}, STAGED),
    (
        "300x129x300 B^T, staged",
        "matmul",
        {"m": 300, "n": 129, "k": 300, "transpose_b": True},
        STAGED,
    ),
    ("16x513x513, wide tiles", "matmul", {"m": 16, "n": 513, "k": 513}, WIDE_TILES),
    (
        "16x513x513, wide tiles, swizzle 4",
        "matmul",
        {"m": 16, "n": 513, "k": 513},
        {**WIDE_TILES, "grid_swizzle_factor": 4},
    ),
    ("256^3, 4x4x4 invocations", "matmul", {"m": 256, "n": 256, "k": 256}, SMALL_INVOCATIONS),
    (
        "8x256x100 A^T, swizzled split-k",
        "matmul",
        {"m": 8, "n": 256, "k": 100, "transpose_a": True},
        SWIZZLED_SPLIT_K,
    ),
    (
        "chain 8192x64, workgroups of 256",
        "chain",
        {"rows": 8192, "cols": 64},
        {"launch.workgroup_size": [256, 1, 1]},
    ),
    ("softmax 256x64, 512 a row", "softmax", {"rows": 256, "cols": 64}, WIDE_ROW_REDUCTION),
]


def median_ms(call: Callable[[], Any], budget: float) -> float:
    """Median of timed calls after one warm-up, at least 5 and as many as
    `budget` seconds allow (up to 200)."""
    call()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 200 and (len(times) < 5 or time.perf_counter() - start < budget):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def with_fields(params: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """`params` with each dotted path in `fields` set."""
    for path, value in fields.items():
        *parents, last = path.split(".")
        node = params
        for key in parents:
            node = node[key]
        node[last] = value
    return params


def run_case(
    name: str, sizes: dict[str, Any], fields: dict[str, Any], device: tf.Device, budget: float
) -> tuple[float, float]:
    """The case's call and the workload's numpy form, ms."""
    workload = tf.workloads.get(name, **sizes)
    fusion = workload.fusion()
    defaults = fusion.heuristics(device=device, cache=False)
    assert isinstance(defaults, tf.HeuristicParams), "each case is one segment"
    params = with_fields(defaults.to_dict(), fields)
    check = tf.Engine(device).verify(workload, params)
    if not check.passed:
        raise SystemExit(f"{workload.key} with {fields}: {check.mismatch}")
    kernel = fusion.schedule(params, device=device)
    inputs = workload.inputs()
    # tilefuse first: numpy's BLAS threads spin on after its calls and
    # would slow whatever is timed right after them.
    ours = median_ms(lambda: kernel(*inputs), budget)
    return ours, median_ms(lambda: workload.numpy(*inputs), budget)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--budget", type=float, default=0.4, help="seconds of timed calls per case")
    args = parser.parse_args()
    device = tf.Device.cpu() if args.device == "cpu" else tf.Device.gpu()
    print(f"{'case':<36} {'tilefuse ms':>12} {'numpy ms':>9} {'ratio':>7}")
    for name, workload, sizes, fields in CASES:
        ours, numpy = run_case(workload, sizes, fields, device, args.budget)
        print(f"{name:<36} {ours:>12.3f} {numpy:>9.3f} {ours / numpy:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
