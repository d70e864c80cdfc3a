"""Reductions as users write them, beyond the workloads: every set of axes
of a 3-D tensor, column sums of tall and wide shapes, and normalizations
over the columns. The user's call ``k(a)`` on the CPU device with the
default heuristics is timed interleaved with numpy's, each result checked
against the float64 reference first; the table gives tilefuse's speed
over numpy's (above 1: tilefuse is faster).

    python benches/reductions.py [--rep 0.5] [--atol 1e-3] [--only SUBSTRING ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

import tilefuse as tf
from tilefuse.timing import Budget, call_sampler, interleave

#: The elementwise functions a case's body calls, for tilefuse and numpy.
TILEFUSE = SimpleNamespace(exp=tf.exp, rsqrt=tf.rsqrt)
NUMPY = SimpleNamespace(exp=np.exp, rsqrt=lambda v: 1 / np.sqrt(v))

#: A case: its name, input shape and body, ``body(x, ops)`` for a
#: tilefuse tensor or a numpy array ``x`` and the matching ``ops``.
Case = tuple[str, tuple[int, ...], Callable[[Any, SimpleNamespace], Any]]


def softmax(x: Any, ops: SimpleNamespace) -> Any:
    """Over axis 0."""
    e = ops.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def batch_norm(x: Any, ops: SimpleNamespace) -> Any:
    """``(x - mean) / sqrt(var + eps)`` over axis 0."""
    d = x - x.mean(axis=0, keepdims=True)
    return d * ops.rsqrt((d * d).mean(axis=0, keepdims=True) + np.float32(1e-5))


def summed(axes: tuple[int, ...]) -> Callable[[Any, SimpleNamespace], Any]:
    return lambda x, _: x.sum(axis=axes)


def cases() -> list[Case]:
    cube = (64, 512, 256)
    out: list[Case] = [
        (f"sum over {axes} of {cube}", cube, summed(axes))
        for axes in [(0,), (1,), (2,), (0, 1), (1, 2), (0, 2), (0, 1, 2)]
    ]
    for shape in [(32768, 256), (131072, 64), (8192, 1024), (4096, 4096), (1024, 300)]:
        out.append((f"sum over (0,) of {shape}", shape, summed((0,))))
    out.append(("softmax over axis 0 of (1024, 4096)", (1024, 4096), softmax))
    out.append(("batch norm over axis 0 of (16384, 256)", (16384, 256), batch_norm))
    # Columns too few for a block a thread: the rows spread over workgroups.
    for shape in [(1024, 300), (4096, 300)]:
        out.append((f"softmax over axis 0 of {shape}", shape, softmax))
        out.append((f"batch norm over axis 0 of {shape}", shape, batch_norm))
    return out


def run(case: Case, budget: Budget, atol: float) -> tuple[float, float]:
    """The medians of tilefuse's call and numpy's, in seconds."""
    _, shape, body = case
    f = tf.Fusion()
    f.output(body(f.input(shape, "f32"), TILEFUSE))
    a = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    k = f.schedule(device="cpu")
    want = f.evaluate(a)
    np.testing.assert_allclose(np.asarray(k(a)), np.asarray(want), rtol=1e-3, atol=atol)
    runs = {"tilefuse": call_sampler(lambda: k(a)), "numpy": call_sampler(lambda: body(a, NUMPY))}
    samples = interleave(runs, budget)
    return float(np.median(samples["tilefuse"])), float(np.median(samples["numpy"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rep", type=float, default=0.5, help="seconds of timing per variant")
    parser.add_argument(
        "--atol", type=float, default=1e-3, help="absolute tolerance against the reference"
    )
    parser.add_argument("--only", nargs="*", default=[], help="cases whose name has one of these")
    args = parser.parse_args()
    budget = Budget(warmup=0.1, rep=args.rep)
    print("| case | tilefuse (ms) | numpy (ms) | speed over numpy |")
    print("|---|---:|---:|---:|")
    for case in cases():
        if args.only and not any(s in case[0] for s in args.only):
            continue
        ours, numpy = run(case, budget, args.atol)
        print(
            f"| {case[0]} | {ours * 1e3:.3f} | {numpy * 1e3:.3f} | {numpy / ours:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
