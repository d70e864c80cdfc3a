"""Fusions as users write them, beyond the workloads: masks (``where``,
comparisons cast to f32), broadcasts and transposed operands, softmax and
layer norm over the last axis of 3-D and 4-D tensors, and matmuls of
skinny, small-k, batched and transposed (``x @ w.T``) shapes. The user's
call ``k(*arrays)`` on the CPU device with the default heuristics is timed
interleaved with numpy's, each result checked against the float64
reference first; the table gives tilefuse's speed over numpy's (above 1:
tilefuse is faster).
``reductions.py`` times reductions over every set of axes the same way.

    python benches/fusions.py [--rep 0.5] [--atol 1e-3] [--only SUBSTRING ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

import tilefuse as tf
from tilefuse.timing import Budget, call_sampler, interleave

#: The functions a case's body calls, for tilefuse and numpy.
#: ``contiguous``: numpy keeps a transposed operand's layout in its result,
#: tilefuse's outputs are C-contiguous, so numpy's result is made so too.
TILEFUSE = SimpleNamespace(
    exp=tf.exp,
    rsqrt=tf.rsqrt,
    sigmoid=tf.sigmoid,
    tanh=tf.tanh,
    where=tf.where,
    contiguous=lambda v: v,
)
NUMPY = SimpleNamespace(
    contiguous=np.ascontiguousarray,
    exp=np.exp,
    rsqrt=lambda v: 1 / np.sqrt(v),
    sigmoid=lambda v: 1 / (1 + np.exp(-v)),
    tanh=np.tanh,
    where=np.where,
)

#: A case: its name, input shapes and body, ``body(*xs, ops)`` for tilefuse
#: tensors or numpy arrays ``xs`` and the matching ``ops``.
Case = tuple[str, Sequence[tuple[int, ...]], Callable[..., Any]]

F32 = np.float32


def softmax(x: Any, ops: SimpleNamespace) -> Any:
    """Over the last axis."""
    e = ops.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x: Any, w: Any, b: Any, ops: SimpleNamespace) -> Any:
    """Over the last axis, with a weight and a bias."""
    d = x - x.mean(axis=-1, keepdims=True)
    return d * ops.rsqrt((d * d).mean(axis=-1, keepdims=True) + F32(1e-5)) * w + b


def matmul(a: Any, b: Any, ops: SimpleNamespace) -> Any:
    return a @ b


def cases() -> list[Case]:
    big, wide = (1 << 22,), (4096, 1024)
    return [
        ("leaky relu 2^22", [big], lambda x, o: o.where(x > 0, x, x * F32(0.1))),
        (
            "clamp to [-1, 1] by where, 2048²",
            [(2048, 2048)],
            lambda x, o: o.where(x > 1, F32(1), o.where(x < -1, F32(-1), x)),
        ),
        ("(x > y) * x, 2^22", [big, big], lambda x, y, o: (x > y).astype(F32) * x),
        ("bias + silu 4096 x 1024", [wide, (1024,)], lambda x, b, o: (x + b) * o.sigmoid(x + b)),
        ("outer product 2048²", [(2048, 1), (1, 2048)], lambda a, b, o: a * b),
        ("a + b.T 2048²", [(2048, 2048)] * 2, lambda a, b, o: a + b.T),
        (
            "heads swapped: x.transpose(0, 2, 1, 3) * 0.125, 8 x 16 x 128 x 64",
            [(8, 16, 128, 64)],
            lambda x, o: o.contiguous(x.transpose(0, 2, 1, 3) * F32(0.125)),
        ),
        (
            "batched transpose + 1, 16 x 512 x 512",
            [(16, 512, 512)],
            lambda x, o: o.contiguous(x.transpose(0, 2, 1) + F32(1)),
        ),
        (
            "x - y over a middle axis, 256 x 256 x 16",
            [(256, 256, 16), (256, 1, 16)],
            lambda x, y, o: x - y,
        ),
        ("x * 2 + 1, 8 x 16 x 128 x 64", [(8, 16, 128, 64)], lambda x, o: x * F32(2) + F32(1)),
        ("softmax of 32 x 128 x 128", [(32, 128, 128)], softmax),
        ("softmax of 8 x 16 x 128 x 128", [(8, 16, 128, 128)], softmax),
        ("softmax of 256²", [(256, 256)], softmax),
        (
            "residual + layer norm 16 x 256 x 1024",
            [(16, 256, 1024), (16, 256, 1024), (1024,), (1024,)],
            lambda x, r, w, b, o: layer_norm(x + r, w, b, o),
        ),
        ("matmul 4096 x 64 x 4096 (small k)", [(4096, 64), (64, 4096)], matmul),
        ("vector @ matrix 1 x 4096 x 4096", [(1, 4096), (4096, 4096)], matmul),
        ("vector @ matrix 1 x 8192 x 8192", [(1, 8192), (8192, 8192)], matmul),
        ("matmul 16 x 4096 x 4096 (skinny m)", [(16, 4096), (4096, 4096)], matmul),
        ("matmul 48 x 4096 x 4096", [(48, 4096), (4096, 4096)], matmul),
        ("matmul 128 x 4096 x 4096", [(128, 4096), (4096, 4096)], matmul),
        ("matmul 4096 x 4096 x 16 (skinny n)", [(4096, 4096), (4096, 16)], matmul),
        ("matmul 512³", [(512, 512)] * 2, matmul),
        ("matmul 768³", [(768, 768)] * 2, matmul),
        ("matmul 1024³", [(1024, 1024)] * 2, matmul),
        ("matmul 300 x 1000 x 1000", [(300, 1000), (1000, 1000)], matmul),
        ("batched matmul 32 x 128 x 64 x 128", [(32, 128, 64), (32, 64, 128)], matmul),
        # A linear layer's weight as torch keeps it: out x in, read transposed.
        ("x @ w.T 64 x 4096 x 1024", [(64, 1024), (4096, 1024)], lambda x, w, o: x @ w.T),
        ("x @ w.T 300 x 129 x 300", [(300, 300), (129, 300)], lambda x, w, o: x @ w.T),
        ("x @ w.T 1024³", [(1024, 1024)] * 2, lambda x, w, o: x @ w.T),
        (
            "tanh(a @ w + b) 1024 x 4096 x 1024",
            [(1024, 1024), (1024, 4096), (4096,)],
            lambda a, w, b, o: o.tanh(a @ w + b),
        ),
    ]


def run(case: Case, budget: Budget, atol: float) -> tuple[float, float]:
    """The medians of tilefuse's call and numpy's, in seconds."""
    _, shapes, body = case
    f = tf.Fusion()
    f.output(body(*[f.input(s, "f32") for s in shapes], TILEFUSE))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    k = f.schedule(device="cpu")
    want = np.asarray(f.evaluate(*xs))
    np.testing.assert_allclose(np.asarray(k(*xs)), want, rtol=1e-3, atol=atol)
    runs = {
        "tilefuse": call_sampler(lambda: k(*xs)),
        "numpy": call_sampler(lambda: body(*xs, NUMPY)),
    }
    # A pause before each chunk: numpy's BLAS threads spin on after its calls.
    samples = interleave(runs, budget, settle=0.2)
    return float(np.median(samples["tilefuse"])), float(np.median(samples["numpy"]))


def main(doc: str, all_cases: list[Case]) -> None:
    """Times ``all_cases`` (those ``--only`` names) and prints the table."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rep", type=float, default=0.5, help="seconds of timing per variant")
    parser.add_argument(
        "--atol", type=float, default=1e-3, help="absolute tolerance against the reference"
    )
    parser.add_argument("--only", nargs="*", default=[], help="cases whose name has one of these")
    args = parser.parse_args()
    budget = Budget(warmup=0.1, rep=args.rep)
    print("| case | tilefuse (ms) | numpy (ms) | speed over numpy |")
    print("|---|---:|---:|---:|")
    for case in all_cases:
        if args.only and not any(s in case[0] for s in args.only):
            continue
        ours, numpy = run(case, budget, args.atol)
        print(
            f"| {case[0]} | {ours * 1e3:.3f} | {numpy * 1e3:.3f} | {numpy / ours:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main(__doc__, cases())
