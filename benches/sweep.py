"""Params sweeps around the default heuristics, to see where they stand.

    python benches/sweep.py softmax            # GPU device, full size
    python benches/sweep.py matmul --device cpu --quick
    python benches/sweep.py softmax --size rows=65536 --size cols=128

Takes one of `benches/run.py`'s cases (or, with `--size`, its workload at
those sizes), asks the default heuristics for its params on the device,
then varies the fields that shape the kernel over a small grid (reduction:
invocations a row, rows a workgroup, tree or subgroup shuffles, unrolled
steps, persistence; matmul: register and workgroup tiles, k step, operand
staging, circular buffering). Every variant is checked against float64 numpy before it
is timed (`Kernel.benchmark`: medians, after its GPU warm-up); rejected
params are counted, not timed. Prints the fastest variants as ratios to the
default, measured in the same run.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import tilefuse as tf

sys.path.insert(0, str(Path(__file__).parent))
import run


def reduction_grid() -> Iterator[dict[str, Any]]:
    """Inner reductions: invocations a row, rows a workgroup (short rows
    with few invocations each fill a workgroup so), shuffles or a tree,
    unrolled steps, one persistent kernel or a dispatch per block."""
    for t, rows, subgroup, unroll, persistent in itertools.product(
        [8, 16, 32, 64, 128, 256, 512], [1, 4, 16], [False, True], [1, 4], [True, False]
    ):
        if t * rows > 1024:
            continue
        yield {
            "reduction_invocations": t,
            "cross_invocation_inner_reduction": True,
            "subgroup_inner_reduction": subgroup,
            "compile": {"use_subgroups": subgroup},
            "unroll_factor_reduction": unroll,
            "persistent_kernel": persistent,
            "rows_per_workgroup": rows,
            "launch": {"workgroup_size": [t * rows, 1, 1]},
        }


def circular(stages: int, gap: int, smem_read: bool = False) -> dict[str, Any]:
    return {
        "async_gmem_load_operands": True,
        "circular_buffer_options": {
            "smem_write": True,
            "stages": stages,
            "prefetch_gap": gap,
            "smem_read": smem_read,
        },
    }


# Operands from global memory, staged in workgroup memory, and staged in
# rotating buffers filled ahead.
STAGING: list[dict[str, Any]] = [
    {"async_gmem_load_operands": False},
    {"async_gmem_load_operands": True},
    circular(2, 1),
    circular(3, 2),
    circular(3, 1, smem_read=True),
]


def matmul_grid() -> Iterator[dict[str, Any]]:
    """Register tile, workgroup tile and k step, operand staging."""
    for (im, in_), (cm, cn), k, staging in itertools.product(
        [(4, 4), (8, 4), (4, 8), (8, 8)],
        [(32, 32), (64, 64), (64, 128), (128, 128)],
        [8, 16, 32],
        STAGING,
    ):
        yield {
            "tile_sizes": {
                "cta_tile": {"m": cm, "n": cn, "k": k},
                "warp_tile": {"m": cm // 2, "n": cn // 2, "k": k},
                "instruction_tile": {"m": im, "n": in_, "k": 4},
            },
            "launch": {"workgroup_size": [cn // in_, cm // im, 1]},
            **staging,
        }


def changed(base: Any, variant: Any, path: str = "") -> list[str]:
    """The fields where `variant` differs from `base`, as `path=value`."""
    if isinstance(base, dict):
        return [c for k in base for c in changed(base[k], variant[k], f"{path}{k}.")]
    return [] if base == variant else [f"{path[:-1]}={variant}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", help="a benches/run.py case: chain, softmax, layernorm, matmul")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        help="the case's workload at this size instead (name=value, repeat)",
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    device = tf.Device.gpu() if args.device == "gpu" else tf.Device.cpu()
    workload = next(c for c in run.cases(args.quick) if c.name.startswith(args.case)).workload
    if args.size:
        sizes = {k: int(v) for k, v in (s.split("=") for s in args.size)}
        workload = tf.workloads.get(workload.name, **sizes)
    fusion, inputs = workload.fusion(), list(workload.inputs())
    (want,) = workload.expected()
    default_params = fusion.heuristics(device=device, cache=False)
    assert isinstance(default_params, tf.HeuristicParams)
    base = default_params.to_dict()
    grids = {"reduction": reduction_grid, "matmul": matmul_grid}
    if base["scheduler"] not in grids:
        sys.exit(f"{args.case}: no sweep for the {base['scheduler']} scheduler")

    def timed(changes: dict[str, Any]) -> tuple[float, list[str]] | None:
        """Median seconds of the default params with `changes`, and the
        fields that changed; `None` where the params are rejected."""
        try:
            params = type(default_params)(base, **changes)
            kernel = fusion.schedule(params, device)
        except (tf.ParamsError, tf.DeviceError):
            return None
        fields = changed(base, params.to_dict())
        got = np.asarray(kernel(*inputs)).reshape(np.shape(want))
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        assert err < 1e-4, f"{fields}: relative error {err}"
        return kernel.benchmark(*inputs, repeat=args.repeat).median, fields

    default = timed({})
    assert default is not None, "the default params were rejected"
    variants = list(grids[base["scheduler"]]())
    results = []
    for i, changes in enumerate(variants):
        print(f"\r{args.case}: {i + 1}/{len(variants)}", end="", file=sys.stderr, flush=True)
        result = timed(changes)
        if result is not None:
            results.append(result)
    print(file=sys.stderr)
    shape = f"{workload.name} {workload.sizes} on {device.info['name']}"
    print(f"{shape}: default {default[0] * 1e3:.3f} ms")
    print(f"{'ms':>9} {'/ default':>9}  changed fields")
    for seconds, fields in sorted(results, key=lambda r: r[0])[: args.top]:
        ratio = seconds / default[0]
        print(f"{seconds * 1e3:>9.3f} {ratio:>9.2f}  {' '.join(fields) or '(the default)'}")
    print(f"({len(variants) - len(results)} of {len(variants)} variants rejected)")


if __name__ == "__main__":
    main()
