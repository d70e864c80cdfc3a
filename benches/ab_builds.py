"""Two builds of the native module timed side by side in one process.

    git worktree add /tmp/base REV
    (cd /tmp/base && cargo build --release -p tilefuse-py --features pyo3/extension-module)
    python benches/ab_builds.py /tmp/base/target/release/lib_native.so \\
        softmax:16384x128 layernorm:65536x16 bias_relu:16384x64 --numpy

On a shared VM the same kernel's time moves 10-50 % from one run to the
next, which hides the changes worth measuring. Here both builds are loaded
into one process (the installed Python package copied twice, each copy with
one build's `_native` module) and their kernels are called in alternation,
so both see the same machine. The order is swapped every call: the second
of two calls in a row ran some 10 % faster, whichever build it was. The
ratio printed is the geometric mean of the two orders' median ratios.

A case is WORKLOAD:ROWSxCOLS, WORKLOAD:size=N,size=N (`tilefuse.workloads`)
or bias_relu:ROWSxCOLS (`relu(x + b)`, `b` along the rows). The first
module is "before", the second "after" (by default the installed one).
Every result of both builds is checked against the float64 reference first.
Each call allocates its outputs, as a user's call does; with --out, each
writes into the arrays its first call returned (`k(*arrays, out=...)`).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import tilefuse

Case = tuple[Any, tuple[np.ndarray, ...], Callable[..., Any]]


def load_builds(before: Path, after: Path, into: Path) -> tuple[ModuleType, ModuleType]:
    """The installed package twice, as `tf_before` and `tf_after`."""
    package = Path(tilefuse.__file__).parent
    modules = []
    for name, native in (("tf_before", before), ("tf_after", after)):
        copy = into / name
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("_native*.so", "__pycache__"))
        shutil.copy(native, copy / Path(tilefuse._native.__file__).name)
        modules.append(name)
    sys.path.insert(0, str(into))
    first, second = (importlib.import_module(m) for m in modules)
    return first, second


def sizes(text: str) -> dict[str, int | bool | str]:
    """`ROWSxCOLS` or `size=N,option=NAME` (an epilogue, say; `true` and
    `false` are booleans)."""
    if "=" not in text:
        rows, cols = text.split("x")
        return {"rows": int(rows), "cols": int(cols)}
    pairs = (part.split("=") for part in text.split(","))
    return {k: option(v) for k, v in pairs}


def option(text: str) -> int | bool | str:
    """A workload option's value from its text."""
    if text.isdigit():
        return int(text)
    return {"true": True, "false": False}.get(text.lower(), text)


def make(tf: ModuleType, case: str) -> Case:
    """The fusion, its inputs and numpy's function for `case`."""
    name, _, size_text = case.partition(":")
    size = sizes(size_text)
    rng = np.random.default_rng(0)
    if name == "bias_relu":
        f = tf.Fusion()
        x = f.input((size["rows"], size["cols"]), name="x")
        b = f.input((size["cols"],), name="b")
        f.output((x + b).relu())
        args = (
            rng.standard_normal((size["rows"], size["cols"]), dtype=np.float32),
            rng.standard_normal(size["cols"], dtype=np.float32),
        )
        return f, args, lambda x, b: np.maximum(x + b, 0)
    w = tf.workloads.get(name, **size)
    return w.fusion(), tuple(w.make_inputs(rng)), w.numpy


def median_ms(times: list[float]) -> float:
    return float(np.median(times)) * 1e3


def compare(
    builds: tuple[ModuleType, ModuleType], case: str, calls: int, numpy: bool, out: bool
) -> str:
    """One table row: both builds' medians, their ratio, numpy's time.
    With `out`, each call writes into arrays it wrote before (`out=`)."""
    kernels = []
    for tf in builds:
        fusion, args, reference = make(tf, case)
        kernel = fusion.schedule(device="cpu")
        want = np.asarray(fusion.evaluate(*args), dtype=np.float64)
        result = kernel(*args)
        np.testing.assert_allclose(result, want, rtol=1e-4, atol=1e-4, err_msg=case)
        kernels.append(partial(kernel, out=result) if out else kernel)
    times: list[list[float]] = [[], []]
    ratios: list[list[float]] = [[], []]
    for call in range(calls):
        for k in (0, 1) if call % 2 == 0 else (1, 0):
            start = time.perf_counter()
            kernels[k](*args)
            times[k].append(time.perf_counter() - start)
        ratios[call % 2].append(times[1][-1] / times[0][-1])
    ratio = float(np.sqrt(np.median(ratios[0]) * np.median(ratios[1])))
    before, after = median_ms(times[0]), median_ms(times[1])
    row = f"| {case} | {before:.3f} | {after:.3f} | {ratio:.2f} |"
    if numpy:
        peer = []
        for _ in range(max(5, calls // 3)):
            start = time.perf_counter()
            reference(*args)
            peer.append(time.perf_counter() - start)
        n = median_ms(peer)
        row += f" {n:.3f} | {n / before:.2f} | {n / after:.2f} |"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path, help="the native module built before the change")
    parser.add_argument("cases", nargs="+", help="WORKLOAD:ROWSxCOLS or WORKLOAD:size=N,...")
    parser.add_argument("--after", type=Path, default=Path(tilefuse._native.__file__))
    parser.add_argument("--calls", type=int, default=40, help="calls of each build per case")
    parser.add_argument("--numpy", action="store_true", help="time numpy's function too")
    parser.add_argument(
        "--out", action="store_true", help="write into the same arrays every call (out=)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        builds = load_builds(args.before, args.after, Path(tmp))
        header = "| case | before (ms) | after (ms) | after / before |"
        rule = "|---|---:|---:|---:|"
        if args.numpy:
            header += " numpy (ms) | numpy speed, before | after |"
            rule += "---:|---:|---:|"
        print(header, rule, sep="\n")
        for case in args.cases:
            print(compare(builds, case, args.calls, args.numpy, args.out), flush=True)


if __name__ == "__main__":
    main()
