"""Reductions as users write them, beyond the workloads: every set of axes
of a 3-D tensor, column sums of tall and wide shapes, normalizations over
the columns, and sums and batch norms over NCHW's and NHWC's channels.
The user's call ``k(a)`` on the CPU device with the default heuristics is
timed interleaved with numpy's, each result checked against the float64
reference first; the table gives tilefuse's speed over numpy's (above 1:
tilefuse is faster).

    python benches/reductions.py [--rep 0.5] [--atol 1e-3] [--only SUBSTRING ...]
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
from fusions import Case, main


def softmax(x: Any, ops: SimpleNamespace) -> Any:
    """Over axis 0."""
    e = ops.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def batch_norm_over(axes: tuple[int, ...]) -> Callable[[Any, SimpleNamespace], Any]:
    """``(x - mean) / sqrt(var + eps)`` over ``axes``."""

    def norm(x: Any, ops: SimpleNamespace) -> Any:
        d = x - x.mean(axis=axes, keepdims=True)
        return d * ops.rsqrt((d * d).mean(axis=axes, keepdims=True) + np.float32(1e-5))

    return norm


batch_norm = batch_norm_over((0,))


def summed(axes: tuple[int, ...]) -> Callable[[Any, SimpleNamespace], Any]:
    return lambda x, _: x.sum(axis=axes)


def cases() -> list[Case]:
    cube = (64, 512, 256)
    out: list[Case] = [
        (f"sum over {axes} of {cube}", [cube], summed(axes))
        for axes in [(0,), (1,), (2,), (0, 1), (1, 2), (0, 2), (0, 1, 2)]
    ]
    for shape in [(32768, 256), (131072, 64), (8192, 1024), (4096, 4096), (1024, 300)]:
        out.append((f"sum over (0,) of {shape}", [shape], summed((0,))))
    out.append(("softmax over axis 0 of (1024, 4096)", [(1024, 4096)], softmax))
    out.append(("batch norm over axis 0 of (16384, 256)", [(16384, 256)], batch_norm))
    # Columns too few for a block a thread: the rows spread over workgroups.
    for shape in [(1024, 300), (4096, 300)]:
        out.append((f"softmax over axis 0 of {shape}", [shape], softmax))
        out.append((f"batch norm over axis 0 of {shape}", [shape], batch_norm))
    # Image layouts: NCHW's statistics over scattered axes, NHWC's over the
    # leading three.
    for shape, axes in [((16, 64, 32, 32), (0, 2, 3)), ((32, 56, 56, 64), (0, 1, 2))]:
        out.append((f"sum over {axes} of {shape}", [shape], summed(axes)))
        out.append((f"batch norm over {axes} of {shape}", [shape], batch_norm_over(axes)))
    return out


if __name__ == "__main__":
    main(__doc__, cases())
