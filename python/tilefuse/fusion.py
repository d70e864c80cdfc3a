"""The fusion builder: numpy-like tensors over ``tilefuse._native.Fusion``.

    f = Fusion()
    x = f.input((4, 8), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    f.output(e / e.sum(axis=1, keepdims=True))
    f.evaluate(np.random.rand(4, 8).astype(np.float32))

Python scalars combine with tensors as constants of the tensor's dtype, as
numpy does with its weak scalar types.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from . import _native
from ._native import FusionError

if TYPE_CHECKING:
    from .complexity import Complexity
    from .params import HeuristicParams
    from .schedule import Device, Kernel, Schedule
    from .segments import Segment, SegmentedKernel

__all__ = [
    "DTypeLike",
    "Fusion",
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

_NUMPY_NAMES = {"float32": "f32", "int32": "i32", "uint32": "u32", "bool": "bool"}
#: The numpy dtype of each of the fusion's dtypes.
NUMPY_DTYPES = {name: np.dtype(numpy) for numpy, name in _NUMPY_NAMES.items()}


def _dtype_name(dtype: DTypeLike) -> str:
    """Accepts "f32" / "float32" / np.float32 / np.dtype("float32")."""
    if isinstance(dtype, str):
        return _NUMPY_NAMES.get(dtype, dtype)
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise FusionError(f"unknown dtype {dtype!r}") from exc
    return _NUMPY_NAMES.get(name, name)


def int64s(what: str, values: Any, error: type[Exception] = FusionError) -> list[int]:
    """``values`` as Python ints in the native layer's int64 range; anything
    else is ``error`` naming ``what`` (never a bare ``OverflowError``)."""
    out = []
    for v in values:
        try:
            if isinstance(v, bool | np.bool_):
                raise TypeError  # a flag, not a count (numpy refuses it as an index)
            i = operator.index(v)
        except TypeError:
            raise error(f"{what}: expected integers, got {v!r}") from None
        if not -(2**63) <= i < 2**63:
            raise error(f"{what}: {i} is out of range")
        out.append(i)
    return out


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


class Fusion:
    """A fusion under construction: a verified DAG of tensor ops."""

    __slots__ = ("_native",)

    def __init__(self) -> None:
        self._native = _native.Fusion()

    def input(
        self, shape: Sequence[int], dtype: DTypeLike = "f32", name: str | None = None
    ) -> Tensor:
        dims = int64s("input shape", shape)
        return Tensor(self, self._native.input(dims, _dtype_name(dtype), name))

    def constant(
        self, value: Scalar | np.number[Any] | np.bool_, dtype: DTypeLike = "f32"
    ) -> Tensor:
        try:
            number = float(value)
        except OverflowError:
            raise FusionError(f"constant: {value} is too large for a float") from None
        return Tensor(self, self._native.constant(number, _dtype_name(dtype)))

    def output(self, *tensors: Tensor) -> None:
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"output: expected a Tensor of this fusion, got {type(t).__name__}")
            if t.fusion is not self:
                raise FusionError("output tensor belongs to a different fusion")
            self._native.output(t.id)

    @property
    def inputs(self) -> list[Tensor]:
        return [Tensor(self, i) for i in self._native.inputs]

    @property
    def outputs(self) -> list[Tensor]:
        return [Tensor(self, i) for i in self._native.outputs]

    def tensor(self, name: str) -> Tensor:
        """Looks a tensor up by its name."""
        for i in range(len(self._native)):
            if self._native.name(i) == name:
                return Tensor(self, i)
        raise KeyError(f"no tensor named {name!r}")

    @property
    def fingerprint(self) -> str:
        """32 hex digits identifying the structure (names excluded), stable
        across processes and platforms; heuristic caches are keyed on it."""
        return self._native.fingerprint()

    def complexity(self) -> Complexity:
        """Flops, bytes read and bytes written of one run (the counting
        rules are in :mod:`tilefuse.complexity`)."""
        from .complexity import Complexity

        return Complexity.from_dict(self._native.summary()["complexity"])

    def to_json(self, indent: bool = False) -> str:
        return self._native.to_json(indent)

    @classmethod
    def from_json(cls, text: str) -> Fusion:
        return _wrap(_native.Fusion.from_json(text))

    # --- automatic scheduling --------------------------------------------------
    def schedulers(self) -> dict[str, str | None]:
        """Each scheduler, mapped to ``None`` if it accepts this fusion or
        to the reason it does not."""
        return dict(_native.schedulers(self._native))

    def _segmented(self) -> bool:
        """No single scheduler accepts the whole fusion."""
        return not any(r is None for r in self.schedulers().values())

    def _parts(self) -> list[Fusion]:
        """The fusions scheduled one by one: the segments', or the whole."""
        return [s.fusion for s in self.segments()] if self._segmented() else [self]

    def segments(self) -> list[Segment]:
        """The parts this fusion runs as: one when a scheduler accepts it
        whole, else several (each a fusion one scheduler accepts), in
        order."""
        from .segments import Segment

        return [
            Segment(
                _wrap(native),
                scheduler,
                [Tensor(self, i) for i in inputs],
                [Tensor(self, i) for i in outputs],
            )
            for native, scheduler, inputs, outputs in _native.segments(self._native)
        ]

    def heuristics(
        self, scheduler: str | None = None, device: Device | str | None = None, cache: bool = True
    ) -> HeuristicParams | list[HeuristicParams]:
        """The params for this fusion on ``device`` (a :class:`Device` or
        ``"cpu"`` / ``"gpu"``; the default device when omitted): a tuned
        winner from the heuristic cache when it has one (unless
        ``cache=False``), else the default heuristic's (see
        :meth:`params_source`). One params object, or one per segment (see
        :meth:`segments`) when no scheduler takes the whole fusion."""
        from . import cache as _cache
        from .params import HeuristicParams
        from .schedule import as_device

        _refuse_device("heuristics", "scheduler", scheduler)
        device = as_device(device)
        if scheduler is None and self._segmented():
            return [
                cast("HeuristicParams", seg.fusion.heuristics(seg.scheduler, device, cache))
                for seg in self.segments()
            ]
        entry = _cache.lookup(self, device, scheduler) if cache else None
        if entry is not None:
            return HeuristicParams._from_native(entry["params"])
        data = _native.heuristics(self._native, device._native, scheduler)
        return HeuristicParams._from_native(data)

    def params_source(
        self, device: Device | str | None = None, scheduler: str | None = None
    ) -> str:
        """Where :meth:`heuristics` takes this fusion's params from on
        ``device``: ``"cache: ..."`` or ``"bundle: ..."`` (with the tuning
        that made them, and whether it searched other fields or values than
        the tuner would now) or ``"default heuristic"``; per segment, joined
        by ``"; "``."""
        from . import cache as _cache
        from .schedule import as_device

        device = as_device(device)
        if scheduler is None and self._segmented():
            return "; ".join(
                seg.fusion.params_source(device, seg.scheduler) for seg in self.segments()
            )
        entry = _cache.lookup(self, device, scheduler)
        if entry is None:
            return "default heuristic"
        speedup = (
            f", {entry['default_time'] / entry['best_time']:.2f}x the default"
            if entry.get("default_time")
            else ""
        )
        layer = (
            f"cache: {_cache.directory()}"
            if entry["layer"] == "cache"
            else (f"bundle: {entry['layer']}")
        )
        imported = ", imported" if entry.get("origin") == "imported" else ""
        space = entry.get("space")
        kind = entry["key"]["scheduler"]
        moved = space and space != _native.space_digest(self._native, device._native, kind)
        # Tuned over other fields or values (a narrowed tune, or an older
        # scheduler's): still served, but tuning again searches this space.
        other = ", over another params space than the tuner's now" if moved else ""
        return f"{layer} ({entry['trials']} trials, {entry['strategy']}{speedup}{imported}{other})"

    def features(self) -> dict[str, Any]:
        """What seed heuristics decide on, as the scheduler that takes the
        fusion sees it: ``{"scheduler", "compute_ops", "matmul": [m, n, k]
        or None, "reduction": {"outer", "reduced", "inner"} or None}``
        (``inner == 1`` for a reduction along the fastest axis)."""
        return _native.features(self._native)

    def tunables(
        self, scheduler: str | None = None, device: Device | str | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """The params fields a tuner may set when ``scheduler`` (the first
        that takes this fusion when omitted) schedules it for ``device``
        (a :class:`Device` or its name; the default when omitted): ``(scheduler, [{"path":
        "tile_sizes.cta_tile.m", "domain": {...}, "values": [...]}, ...])``.
        Every value either schedules or is refused with ``ParamsError``
        (some act only with another field set, as circular buffering needs
        staged operands)."""
        from .schedule import as_device

        _refuse_device("tunables", "scheduler", scheduler)
        device = as_device(device)
        return _native.tunables(self._native, device._native, scheduler)

    def schedule(
        self,
        params: HeuristicParams
        | dict[str, Any]
        | Sequence[HeuristicParams | dict[str, Any]]
        | None = None,
        device: Device | str | None = None,
    ) -> Kernel | SegmentedKernel:
        """Schedules with ``params`` and compiles for ``device``; the kernel's
        ``.schedule`` shows the loop nest and trace the scheduler made. A
        list (one params object per segment) schedules each segment and
        returns a :class:`SegmentedKernel`. A dict (``to_dict()``'s form,
        with its ``"scheduler"`` tag) works wherever a params object does.
        Without ``params``, the default heuristic's for ``device`` (params
        picked for one device kind run anywhere, but are tuned for theirs:
        ``f.heuristics()`` without a device picks the default device's)."""
        from .params import HeuristicParams
        from .schedule import as_device
        from .segments import SegmentedKernel

        _refuse_device("schedule", "params", params)
        device = as_device(device)
        if params is None:
            params = self.heuristics(device=device)
        if isinstance(params, dict):
            params = cast("HeuristicParams", HeuristicParams.from_dict(params))
        if isinstance(params, Sequence):
            segments = self.segments()
            if len(params) != len(segments):
                raise _native.ParamsError(
                    f"scheduler: the fusion runs as {len(segments)} segments, "
                    f"got {len(params)} params"
                )
            kernels = [
                cast("Kernel", seg.fusion.schedule(p, device))
                for seg, p in zip(segments, params, strict=True)
            ]
            return SegmentedKernel(self, segments, kernels, device)
        try:
            schedule = self._auto_schedule(params, device)
        except _native.ParamsError as e:
            if not self._segmented():
                raise
            kinds = ", ".join(seg.scheduler for seg in self.segments())
            raise _native.ParamsError(
                f"scheduler: the fusion runs as segments ({kinds}); give a list of params, "
                "one per segment (as f.heuristics() does)"
            ) from e
        return schedule.build(device)

    def _auto_schedule(self, params: HeuristicParams | dict[str, Any], device: Device) -> Schedule:
        """The schedule the automatic scheduler makes with ``params`` (not
        yet built)."""
        from .schedule import Schedule

        s = Schedule.__new__(Schedule)
        s.fusion = self
        given = params.to_dict() if not isinstance(params, dict) else params
        s._native = _native.schedule(self._native, given, device._native)
        return s

    def execute(
        self,
        *arrays: Any,
        params: HeuristicParams | Sequence[HeuristicParams] | None = None,
        device: Device | str | None = None,
    ) -> Any:
        """Runs the fusion with ``params`` (the default heuristic's when
        omitted) on ``device``; numpy arrays in, numpy arrays out."""
        return self.schedule(params, device)(*arrays)

    def create_schedule(self) -> Schedule:
        """The initial schedule: one block per op in its own loop nest."""
        from .schedule import Schedule

        return Schedule(self)

    def evaluate(self, *arrays: Any) -> Any:
        """Runs the reference evaluator (float64 math, rounded once per op).
        Returns one numpy array, or a tuple when the fusion has several
        outputs. Inputs must match the declared shapes and dtypes."""
        outs = self._native.evaluate(*(np.asarray(a) for a in arrays))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __len__(self) -> int:
        return len(self._native)

    def __str__(self) -> str:
        return str(self._native)

    def __repr__(self) -> str:
        return f"<Fusion {self.fingerprint[:12]}: {len(self)} tensors>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fusion) and self._native == other._native

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __reduce__(self) -> tuple[Any, ...]:
        return (Fusion.from_json, (self.to_json(),))


def _wrap(native: _native.Fusion) -> Fusion:
    f = Fusion.__new__(Fusion)
    f._native = native
    return f


def _refuse_device(method: str, arg: str, value: object) -> None:
    """A device given where ``method`` takes ``arg`` first (as
    ``f.heuristics(device)`` would give it) is a clear TypeError, not a
    confusing one from deeper down."""
    if value is None:  # the usual case, on the path of every heuristics() call
        return
    from .schedule import DeviceFacts

    if isinstance(value, DeviceFacts) or (isinstance(value, str) and value in ("cpu", "gpu")):
        raise TypeError(
            f"{method}(): {arg} got a device ({value!r}); pass it by keyword: {method}(device=...)"
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


def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """``a @ b`` over the last two axes with broadcast batch axes; either
    operand can be read transposed without a separate permute."""
    b = a._coerce(b)
    return Tensor(a.fusion, a.fusion._native.matmul(a.id, b.id, transpose_a, transpose_b))


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
