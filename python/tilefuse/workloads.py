"""The built-in workloads, with size parameters:

    tilefuse.workloads.names()          # ["attention", "chain", ...]
    w = tilefuse.workloads.get("softmax", rows=4096, cols=4096)

Each has a numpy form (``w.numpy(*w.inputs())``) for speedups over numpy.
:func:`register` adds a :class:`~tilefuse.Workload` subclass of your own.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .fusion import Fusion
from .tensor import Tensor, gelu, matmul, relu
from .workload import Size, Workload, describe, get, names, register

__all__ = ["describe", "get", "names", "register"]

#: The dtypes the built-in workloads' float tensors may take.
FLOAT_DTYPES = ("f32", "f16", "bf16")


class _Typed(Workload):
    """A workload whose float tensors take the ``dtype`` option (``"f32"``,
    ``"f16"`` or ``"bf16"``)."""

    defaults: ClassVar[dict[str, Size]] = {"dtype": "f32"}
    implicit: ClassVar[frozenset[str]] = frozenset({"dtype"})

    def __init__(self, **sizes: Size) -> None:
        super().__init__(**sizes)
        if self.sizes["dtype"] not in FLOAT_DTYPES:
            known = ", ".join(FLOAT_DTYPES)
            got = self.sizes["dtype"]
            raise ValueError(f"workload {self.name}: dtype must be one of {known}, got {got!r}")

    @property
    def dtype(self) -> str:
        return str(self.sizes["dtype"])

    def _input(self, f: Fusion, shape: tuple[int, ...], name: str) -> Tensor:
        return f.input(shape, self.dtype, name=name)


class _Rows(_Typed):
    """A workload over a ``rows x cols`` matrix ``x`` of ``dtype``."""

    defaults: ClassVar[dict[str, Size]] = {"rows": 4096, "cols": 4096, **_Typed.defaults}

    def _x(self, f: Fusion) -> Tensor:
        return self._input(f, (self.size("rows"), self.size("cols")), "x")


@register
class Chain(_Rows):
    name = "chain"
    summary = "pointwise chain tanh(a*b+1)*0.5 + exp(-a) over two rows x cols arrays"

    def fusion(self) -> Fusion:
        f = Fusion()
        shape = (self.size("rows"), self.size("cols"))
        a, b = self._input(f, shape, "a"), self._input(f, shape, "b")
        y = (a * b + 1).tanh() * 0.5 + (-a).exp()
        y.name = "y"
        f.output(y)
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        a, b = inputs
        return np.tanh(a * b + 1) * 0.5 + np.exp(-a)


@register
class Softmax(_Rows):
    name = "softmax"
    summary = "softmax along the rows"

    def fusion(self) -> Fusion:
        f = Fusion()
        x = self._x(f)
        e = (x - x.max(axis=1, keepdims=True)).exp()
        e.name = "e"  # block names for hand schedules (benches/run.py)
        y = e / e.sum(axis=1, keepdims=True)
        y.name = "y"
        f.output(y)
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        (x,) = inputs
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


@register
class LogSoftmax(_Rows):
    name = "log_softmax"
    summary = "log-softmax along the rows"

    def fusion(self) -> Fusion:
        f = Fusion()
        x = self._x(f)
        d = x - x.max(axis=1, keepdims=True)
        f.output(d - d.exp().sum(axis=1, keepdims=True).log())
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        (x,) = inputs
        d = x - x.max(axis=1, keepdims=True)
        return d - np.log(np.exp(d).sum(axis=1, keepdims=True))


@register
class LayerNorm(_Rows):
    name = "layernorm"
    summary = "layer norm along the rows with a weight and a bias (eps 1e-5)"

    def fusion(self) -> Fusion:
        f = Fusion()
        x = self._x(f)
        w = self._input(f, (self.size("cols"),), "weight")
        b = self._input(f, (self.size("cols"),), "bias")
        d = x - x.mean(axis=1, keepdims=True)
        var = (d * d).mean(axis=1, keepdims=True)
        f.output(d * (var + 1e-5).rsqrt() * w + b)
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        x, w, b = inputs
        d = x - x.mean(axis=1, keepdims=True)
        return d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w + b


@register
class RmsNorm(_Rows):
    name = "rmsnorm"
    summary = "RMS norm along the rows with a weight (eps 1e-6)"

    def fusion(self) -> Fusion:
        f = Fusion()
        x = self._x(f)
        w = self._input(f, (self.size("cols"),), "weight")
        f.output(x * ((x * x).mean(axis=1, keepdims=True) + 1e-6).rsqrt() * w)
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        x, w = inputs
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w


@register
class RowSum(_Rows):
    name = "row_sum"
    summary = "sum of each row (x.sum(axis=1))"

    def fusion(self) -> Fusion:
        f = Fusion()
        f.output(self._x(f).sum(axis=1))
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        return inputs[0].sum(axis=1)


@register
class ColumnSum(_Rows):
    name = "column_sum"
    summary = "sum of each column (x.sum(axis=0))"

    def fusion(self) -> Fusion:
        f = Fusion()
        f.output(self._x(f).sum(axis=0))
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        return inputs[0].sum(axis=0)


_EPILOGUES = ("none", "bias", "relu", "gelu", "bias_relu", "bias_gelu", "residual")


@register
class Matmul(_Typed):
    name = "matmul"
    summary = "a @ b (optionally batched and transposed) with an epilogue: " + ", ".join(_EPILOGUES)
    defaults: ClassVar[dict[str, Size]] = {
        "m": 1024,
        "n": 1024,
        "k": 1024,
        "batch": 1,
        "transpose_a": False,
        "transpose_b": False,
        "epilogue": "none",
        **_Typed.defaults,
    }

    def __init__(self, **sizes: Size) -> None:
        super().__init__(**sizes)
        if self.sizes["epilogue"] not in _EPILOGUES:
            raise ValueError(
                f"workload {self.name}: epilogue must be one of {', '.join(_EPILOGUES)}, "
                f"got {self.sizes['epilogue']!r}"
            )

    def _shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The shapes of a, b and the result."""
        m, n, k, batch = (self.size(s) for s in ("m", "n", "k", "batch"))
        lead = (batch,) if batch > 1 else ()
        a = (k, m) if self.sizes["transpose_a"] else (m, k)
        b = (n, k) if self.sizes["transpose_b"] else (k, n)
        return lead + a, lead + b, (*lead, m, n)

    def fusion(self) -> Fusion:
        f = Fusion()
        a_shape, b_shape, out = self._shapes()
        a, b = self._input(f, a_shape, "a"), self._input(f, b_shape, "b")
        y = matmul(a, b, bool(self.sizes["transpose_a"]), bool(self.sizes["transpose_b"]))
        epilogue = str(self.sizes["epilogue"])
        if epilogue.startswith("bias"):
            y = y + self._input(f, out[-1:], "bias")
        if epilogue == "residual":
            y = y + self._input(f, out, "residual")
        if epilogue.endswith("relu"):
            y = relu(y)
        elif epilogue.endswith("gelu"):
            y = gelu(y)
        f.output(y)
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        a, b, *rest = inputs
        a = np.swapaxes(a, -1, -2) if self.sizes["transpose_a"] else a
        b = np.swapaxes(b, -1, -2) if self.sizes["transpose_b"] else b
        y = a @ b
        for extra in rest:
            y = y + extra
        epilogue = str(self.sizes["epilogue"])
        if epilogue.endswith("relu"):
            y = np.maximum(y, 0)
        elif epilogue.endswith("gelu"):
            y = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
        return y


@register
class BatchedMatmul(Matmul):
    name = "batched_matmul"
    summary = "a batch of matmuls (the matmul workload with batch 8 by default)"
    defaults: ClassVar[dict[str, Size]] = {
        **Matmul.defaults,
        "m": 256,
        "n": 256,
        "k": 256,
        "batch": 8,
    }


@register
class Attention(_Typed):
    name = "attention"
    summary = "softmax(q @ k^T / sqrt(dim)) @ v: matmul -> softmax -> matmul segments"
    defaults: ClassVar[dict[str, Size]] = {"seq": 512, "dim": 64, **_Typed.defaults}

    def fusion(self) -> Fusion:
        f = Fusion()
        shape = (self.size("seq"), self.size("dim"))
        q, k, v = (self._input(f, shape, n) for n in ("q", "k", "v"))
        s = matmul(q, k, transpose_b=True) * float(self.size("dim")) ** -0.5
        e = (s - s.max(axis=1, keepdims=True)).exp()
        f.output((e / e.sum(axis=1, keepdims=True)) @ v)
        return f

    def numpy(self, *inputs: np.ndarray) -> Any:
        q, k, v = inputs
        s = q @ k.T * np.float32(float(self.size("dim")) ** -0.5)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True) @ v
