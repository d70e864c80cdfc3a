"""Tensors of a fusion, numpy-like: operators, elementwise methods,
reductions and layout, and the free functions (``where``, ``maximum``,
``matmul``, ``exp``...) that build the same ops.

Python scalars combine with tensors as constants of the tensor's dtype, as
numpy does with its weak scalar types.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from ._args import int64s
from ._native import FusionError

if TYPE_CHECKING:
    from .fusion import Fusion

__all__ = [
    "NUMPY_DTYPES",
    "RTOL_FLOOR",
    "DTypeLike",
    "Tensor",
    "abs",
    "cos",
    "exp",
    "gelu",
    "log",
    "matmul",
    "maximum",
    "minimum",
    "reciprocal",
    "relu",
    "rsqrt",
    "sigmoid",
    "sin",
    "sqrt",
    "tanh",
    "where",
]

DTypeLike: TypeAlias = "str | np.dtype[Any] | type"
Scalar: TypeAlias = "int | float | bool"
Operand: TypeAlias = "Tensor | int | float | bool"

_NUMPY_NAMES = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int32": "i32",
    "uint32": "u32",
    "bool": "bool",
}


class _NumpyDTypes(Mapping[str, "np.dtype[Any]"]):
    """The numpy dtype of each of the fusion's dtypes; bf16's is
    ``ml_dtypes.bfloat16`` (the one JAX and others use), imported when
    first asked for: importing ml_dtypes takes about a second."""

    def __getitem__(self, name: str) -> np.dtype[Any]:
        if name == "bf16":
            import ml_dtypes

            bfloat16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
            return bfloat16
        numpy = {v: k for k, v in _NUMPY_NAMES.items()}[name]
        return np.dtype(numpy)

    def __iter__(self) -> Iterator[str]:
        return iter(_NUMPY_NAMES.values())

    def __len__(self) -> int:
        return len(_NUMPY_NAMES)


NUMPY_DTYPES: Mapping[str, np.dtype[Any]] = _NumpyDTypes()

#: The least relative tolerance each half dtype's results are checked with:
#: two steps of its precision, as a device's f32 result may round the other
#: way (``DType::rtol_floor`` in the Rust core; ``docs/semantics.md``).
RTOL_FLOOR = {"f16": 2 * 2.0**-10, "bf16": 2 * 2.0**-7}


def is_float(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` is a float numpy dtype, ``ml_dtypes.bfloat16``
    (which numpy does not count among its floating types) included."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def rtol_for(dtype: np.dtype[Any], rtol: float) -> float:
    """``rtol`` for results of ``dtype``: at least its :data:`RTOL_FLOOR`."""
    return max(rtol, RTOL_FLOOR.get(_NUMPY_NAMES.get(dtype.name, ""), 0.0))


def _dtype_name(dtype: DTypeLike) -> str:
    """Accepts "f32" / "float32" / np.float32 / np.dtype("float32"), and
    so for "f16" and "bf16" (``ml_dtypes.bfloat16``)."""
    if isinstance(dtype, str):
        return _NUMPY_NAMES.get(dtype, dtype)
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise FusionError(f"unknown dtype {dtype!r}") from exc
    return _NUMPY_NAMES.get(name, name)


def _axes(axis: int | Sequence[int] | None) -> list[int] | None:
    if axis is None:
        return None
    return int64s("axis", [axis] if isinstance(axis, int) else axis)


def _ints(what: str, args: tuple[int | Sequence[int], ...]) -> list[int]:
    """numpy's calling convention: ``f(2, 3)`` or ``f((2, 3))``."""
    one = len(args) == 1 and not isinstance(args[0], int)
    return int64s(what, cast("Sequence[int]", args[0] if one else args))


class Tensor:
    """A tensor of a fusion under construction. Operators and methods add
    ops to the fusion; nothing is computed until the fusion runs."""

    __slots__ = ("fusion", "id")
    __array_priority__ = 1000  # numpy scalars on the left defer to us

    def __init__(self, fusion: Fusion, id: int) -> None:
        self.fusion = fusion
        self.id = id

    # --- metadata ---------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.fusion._native.shape(self.id))

    @property
    def dtype(self) -> str:
        return str(self.fusion._native.dtype(self.id))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def op(self) -> str:
        """The op producing this tensor (``"input"``, ``"exp"``, ...)."""
        return str(self.fusion._native.op(self.id))

    @property
    def name(self) -> str | None:
        return self.fusion._native.name(self.id)

    @name.setter
    def name(self, value: str) -> None:
        self.fusion._native.set_name(self.id, value)

    def __repr__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        return f"<Tensor {self.fusion._native.label(self.id)}: {self.dtype}[{dims}] = {self.op}>"

    def __bool__(self) -> bool:
        raise TypeError("a fusion Tensor has no truth value; use tilefuse.where for selection")

    __hash__ = object.__hash__

    # --- helpers ----------------------------------------------------------
    def _coerce(self, other: Operand) -> Tensor:
        if isinstance(other, Tensor):
            if other.fusion is not self.fusion:
                raise FusionError("tensors belong to different fusions")
            return other
        if isinstance(other, bool | int | float | np.number | np.bool_):
            return self.fusion.constant(other, self.dtype)
        raise TypeError(f"cannot combine a Tensor with {type(other).__name__}")

    def _unary(self, func: str) -> Tensor:
        return Tensor(self.fusion, self.fusion._native.unary(func, self.id))

    def _binary(self, func: str, other: Operand, reverse: bool = False) -> Tensor:
        a, b = self, self._coerce(other)
        if reverse:
            a, b = b, a
        return Tensor(self.fusion, self.fusion._native.binary(func, a.id, b.id))

    def _reduce(self, func: str, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
        return Tensor(self.fusion, self.fusion._native.reduce(func, self.id, _axes(axis), keepdims))

    # --- operators --------------------------------------------------------
    def __add__(self, o: Operand) -> Tensor:
        return self._binary("add", o)

    def __radd__(self, o: Operand) -> Tensor:
        return self._binary("add", o, reverse=True)

    def __sub__(self, o: Operand) -> Tensor:
        return self._binary("sub", o)

    def __rsub__(self, o: Operand) -> Tensor:
        return self._binary("sub", o, reverse=True)

    def __mul__(self, o: Operand) -> Tensor:
        return self._binary("mul", o)

    def __rmul__(self, o: Operand) -> Tensor:
        return self._binary("mul", o, reverse=True)

    def __truediv__(self, o: Operand) -> Tensor:
        return self._binary("div", o)

    def __rtruediv__(self, o: Operand) -> Tensor:
        return self._binary("div", o, reverse=True)

    def __pow__(self, o: Operand) -> Tensor:
        return self._binary("pow", o)

    def __rpow__(self, o: Operand) -> Tensor:
        return self._binary("pow", o, reverse=True)

    def __matmul__(self, o: Tensor) -> Tensor:
        return matmul(self, o)

    def __rmatmul__(self, o: Tensor) -> Tensor:
        return matmul(o, self)

    def __neg__(self) -> Tensor:
        return self._unary("neg")

    def __abs__(self) -> Tensor:
        return self._unary("abs")

    def __lt__(self, o: Operand) -> Tensor:
        return self._binary("lt", o)

    def __le__(self, o: Operand) -> Tensor:
        return self._binary("le", o)

    def __gt__(self, o: Operand) -> Tensor:
        return self._binary("gt", o)

    def __ge__(self, o: Operand) -> Tensor:
        return self._binary("ge", o)

    def __eq__(self, o: Operand) -> Tensor:  # type: ignore[override]
        return self._binary("eq", o)

    def __ne__(self, o: Operand) -> Tensor:  # type: ignore[override]
        return self._binary("ne", o)

    # --- elementwise methods ----------------------------------------------
    def neg(self) -> Tensor:
        return self._unary("neg")

    def exp(self) -> Tensor:
        return self._unary("exp")

    def log(self) -> Tensor:
        return self._unary("log")

    def sqrt(self) -> Tensor:
        return self._unary("sqrt")

    def rsqrt(self) -> Tensor:
        return self._unary("rsqrt")

    def tanh(self) -> Tensor:
        return self._unary("tanh")

    def sigmoid(self) -> Tensor:
        return self._unary("sigmoid")

    def relu(self) -> Tensor:
        return self._unary("relu")

    def gelu(self) -> Tensor:
        """GELU with the tanh approximation (torch's ``approximate="tanh"``)."""
        return self._unary("gelu")

    def sin(self) -> Tensor:
        return self._unary("sin")

    def cos(self) -> Tensor:
        return self._unary("cos")

    def reciprocal(self) -> Tensor:
        return self._unary("reciprocal")

    def abs(self) -> Tensor:
        return self._unary("abs")

    def maximum(self, o: Operand) -> Tensor:
        return self._binary("max", o)

    def minimum(self, o: Operand) -> Tensor:
        return self._binary("min", o)

    def astype(self, dtype: DTypeLike) -> Tensor:
        return Tensor(self.fusion, self.fusion._native.cast(self.id, _dtype_name(dtype)))

    # --- reductions ---------------------------------------------------------
    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce("sum", axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce("max", axis, keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce("min", axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce("mean", axis, keepdims)

    # --- layout -----------------------------------------------------------
    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """numpy style: ``x.reshape(2, -1)`` or ``x.reshape((2, -1))``."""
        return Tensor(self.fusion, self.fusion._native.reshape(self.id, _ints("reshape", shape)))

    def permute(self, *axes: int | Sequence[int]) -> Tensor:
        """Output axis ``i`` is input axis ``axes[i]``: ``x.permute(1, 0)``."""
        return Tensor(self.fusion, self.fusion._native.permute(self.id, _ints("permute", axes)))

    def transpose(self, *axes: int | Sequence[int]) -> Tensor:
        """numpy's ``transpose``: reverses the axes when none are given."""
        return self.permute(*axes) if axes else self.T

    @property
    def T(self) -> Tensor:
        return self.permute(list(reversed(range(self.ndim))))

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return Tensor(
            self.fusion, self.fusion._native.broadcast(self.id, int64s("broadcast_to", shape))
        )


def _tensor(x: Operand, *others: Operand) -> Tensor:
    for t in (x, *others):
        if isinstance(t, Tensor):
            return t
    raise TypeError("at least one argument must be a Tensor")


def _scalar_dtype(value: Operand) -> str:
    """The dtype a lone Python scalar takes: bool, i32 for ints, else f32."""
    if isinstance(value, bool | np.bool_):
        return "bool"
    return "i32" if isinstance(value, int | np.integer) else "f32"


def where(cond: Tensor, a: Operand, b: Operand) -> Tensor:
    """``a`` where ``cond`` is true, else ``b``, broadcast like numpy. A
    scalar branch takes the other branch's dtype (or its own, if both are
    scalars)."""
    if not isinstance(cond, Tensor):
        raise TypeError("where: the condition must be a Tensor")
    fusion = cond.fusion
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        ref = _tensor(a, b)
        a_t, b_t = ref._coerce(a), ref._coerce(b)
    else:
        a_t = fusion.constant(a, _scalar_dtype(a))
        b_t = fusion.constant(b, _scalar_dtype(b))
    c = a_t._coerce(cond)
    return Tensor(fusion, fusion._native.where(c.id, a_t.id, b_t.id))


def _binary_fn(func: str, a: Operand, b: Operand) -> Tensor:
    if isinstance(a, Tensor):
        return a._binary(func, b)
    return _tensor(b)._binary(func, a, reverse=True)


def maximum(a: Operand, b: Operand) -> Tensor:
    """Elementwise maximum (NaN propagates, as in numpy)."""
    return _binary_fn("max", a, b)


def minimum(a: Operand, b: Operand) -> Tensor:
    """Elementwise minimum (NaN propagates, as in numpy)."""
    return _binary_fn("min", a, b)


def matmul(
    a: Tensor,
    b: Tensor,
    transpose_a: bool = False,
    transpose_b: bool = False,
    *,
    out_dtype: DTypeLike | None = None,
) -> Tensor:
    """``a @ b`` over the last two axes with broadcast batch axes; either
    operand can be read transposed without a separate permute. Sums in
    f32 and rounds once to ``out_dtype``, by default the operands' dtype:
    ``out_dtype="f32"`` keeps the f32 sums of half operands (Triton's
    ``tl.dot(a, b, out_dtype=tl.float32)``)."""
    b = a._coerce(b)
    dtype = None if out_dtype is None else _dtype_name(out_dtype)
    native = a.fusion._native.matmul(a.id, b.id, transpose_a, transpose_b, dtype)
    return Tensor(a.fusion, native)


def _unary_fn(name: str) -> Any:
    def fn(x: Tensor) -> Tensor:
        return x._unary(name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}``."
    return fn


exp = _unary_fn("exp")
log = _unary_fn("log")
sqrt = _unary_fn("sqrt")
rsqrt = _unary_fn("rsqrt")
tanh = _unary_fn("tanh")
sigmoid = _unary_fn("sigmoid")
relu = _unary_fn("relu")
gelu = _unary_fn("gelu")
sin = _unary_fn("sin")
cos = _unary_fn("cos")
reciprocal = _unary_fn("reciprocal")
abs = _unary_fn("abs")
