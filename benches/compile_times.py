"""Each distinct kernel of a params space: its first call (compile + run)
and its second call, on the GPU device.

    MESA_SHADER_CACHE_DISABLE=true python benches/compile_times.py softmax \\
        --size rows=1000 --size cols=1000 \\
        --fields launch.workgroup_size,reduction_invocations,subgroup_inner_reduction

Every combination of the named tunable fields (the others at the default
heuristic's values) is scheduled; combinations the scheduler refuses and
kernels whose WGSL was already timed are skipped. On lavapipe the first
call compiles the shader (with Mesa's shader cache off, every time), so
this finds the points whose compile stalls a tune. The slowest first calls
come last, as a table.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time
from typing import Any

from rich.console import Console
from rich.table import Table

import tilefuse as tf


def set_field(params: dict[str, Any], path: str, value: Any) -> None:
    *outer, last = path.split(".")
    for key in outer:
        params = params[key]
    params[last] = value


def get_field(params: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        params = params[key]
    return params


def points(f: tf.Fusion, device: tf.Device, names: list[str]) -> list[dict[str, Any]]:
    """Every combination of the fields `names`, as params dicts."""
    _, tunables = f.tunables(device=device)
    fields = [t for t in tunables if t["path"] in names]
    missing = set(names) - {t["path"] for t in fields}
    if missing:
        known = ", ".join(t["path"] for t in tunables)
        raise SystemExit(f"not tunable here: {', '.join(sorted(missing))} (known: {known})")
    base = f.heuristics(device=device, cache=False)
    assert not isinstance(base, list), "one segment"
    out = []
    for values in itertools.product(*(t["values"] for t in fields)):
        p = copy.deepcopy(base.to_dict())
        for t, v in zip(fields, values, strict=True):
            set_field(p, t["path"], v)
        out.append(p)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", help="a built-in workload (tilefuse.workloads.names())")
    parser.add_argument("--size", action="append", default=[], help="NAME=INT, repeatable")
    parser.add_argument("--fields", required=True, help="comma-separated params paths")
    parser.add_argument("--top", type=int, default=15, help="rows of the table")
    args = parser.parse_args()
    sizes = {k: int(v) for k, v in (s.split("=", 1) for s in args.size)}
    paths = args.fields.split(",")
    w = tf.workloads.get(args.workload, **sizes)
    f, inputs = w.fusion(), w.inputs()
    device = tf.Device.gpu()
    seen: set[str] = set()
    rows = []
    for p in points(f, device, paths):
        try:
            k = f.schedule(p, device)
        except tf.TilefuseError:
            continue
        assert isinstance(k, tf.Kernel), "one segment"
        if k.wgsl in seen:
            continue
        seen.add(k.wgsl)
        start = time.perf_counter()
        k(*inputs)
        first = time.perf_counter() - start
        start = time.perf_counter()
        k(*inputs)
        second = time.perf_counter() - start
        values = [str(get_field(p, path)) for path in paths]
        rows.append((first, second, k.wgsl.count("\n"), values))
        print(f"{first:8.3f} s {second:8.4f} s  {' '.join(values)}", flush=True)
    rows.sort(key=lambda r: -r[0])
    table = Table(title=f"{args.workload} {sizes} on {device.info['name']}: slowest first calls")
    names = [path.split(".")[-1] for path in paths]
    for column in ["first call s", "second call s", "WGSL lines", *names]:
        table.add_column(column)
    for first, second, lines, values in rows[: args.top]:
        table.add_row(f"{first:.3f}", f"{second:.4f}", str(lines), *values)
    Console().print(table)
    total = sum(r[0] for r in rows)
    print(f"{len(rows)} kernels, first calls {total:.1f} s in all")


if __name__ == "__main__":
    main()
