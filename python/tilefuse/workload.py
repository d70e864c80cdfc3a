"""Workloads (seed 004), kept thin: a problem of fixed sizes whose only
required part is its fusion.

    class Scale(tilefuse.Workload):
        name = "scale"
        defaults = {"n": 4096}

        def fusion(self):
            f = tilefuse.Fusion()
            x = f.input((self.sizes["n"],), name="x")
            f.output(x * 2)
            return f

    w = Scale(n=1 << 20)
    tilefuse.Engine(tilefuse.Device.cpu()).benchmark(w)

Everything else has a default: random inputs per seed (cached, never
zeros), the float64 reference evaluator's outputs (cached per seed), the
complexity counted from the fusion, a tolerance and device requirements.
The engine, the tuner and the benches reuse the cached inputs and
references across thousands of runs. A :class:`~tilefuse.Fusion`, a
function returning one, or a fusion JSON file works wherever a workload
does (:func:`as_workload`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeAlias, TypeVar

import numpy as np

from .complexity import Complexity
from .fusion import Fusion
from .tensor import NUMPY_DTYPES, is_float, rtol_for

__all__ = [
    "Requirements",
    "Tolerance",
    "Verification",
    "Workload",
    "WorkloadLike",
    "as_workload",
    "compare_outputs",
    "describe",
    "get",
    "names",
    "register",
]

Size = int | bool | str


@dataclass(frozen=True)
class Tolerance:
    """How close a float output must be to the reference: an element passes
    when it equals the reference (NaN where the reference is NaN, the same
    infinity) or ``|got - want| <= rtol * (scale + |want|)``, ``scale``
    being the output's largest finite ``|want|`` (reductions reassociate,
    so errors grow with the magnitudes summed), ``rtol`` being at least the
    dtype's :data:`~tilefuse.tensor.RTOL_FLOOR` for f16 and bf16. The tuner
    checks candidates with the same rule. Integer and bool outputs must
    match exactly."""

    rtol: float = 1e-3


@dataclass(frozen=True)
class Verification:
    """Outputs compared with the reference."""

    passed: bool
    #: Largest ``|got - want|`` over finite elements of every f32 output.
    max_abs_error: float
    #: Largest ``|got - want| / (scale + |want|)`` over finite elements:
    #: the quantity :class:`Tolerance` bounds by ``rtol``.
    max_rel_error: float
    tolerance: Tolerance
    #: The first element out of tolerance, e.g. ``"output 0 at (3, 5): got
    #: 1.5, want 1.0"``; ``None`` when every element passed.
    mismatch: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_outputs(
    got: Sequence[np.ndarray], want: Sequence[np.ndarray], tolerance: Tolerance
) -> Verification:
    """Compares outputs with references under ``tolerance``."""
    if len(got) != len(want):
        raise ValueError(f"compare: {len(got)} outputs, want {len(want)}")
    max_abs = max_rel = 0.0
    mismatch = None
    for o, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            raise ValueError(f"compare: output {o} has shape {g.shape}, want {w.shape}")
        bad, abs_err, rel_err = _out_of_tolerance(g, w, tolerance)
        max_abs, max_rel = max(max_abs, abs_err), max(max_rel, rel_err)
        if mismatch is None and bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            mismatch = f"output {o} at {at}: got {g[at]!r}, want {w[at]!r}"
    return Verification(mismatch is None, max_abs, max_rel, tolerance, mismatch)


def _out_of_tolerance(
    g: np.ndarray, w: np.ndarray, tolerance: Tolerance
) -> tuple[np.ndarray, float, float]:
    """Elements out of tolerance, and the largest absolute and relative
    errors over finite elements."""
    if not is_float(w.dtype):
        return g != w, float(np.abs(g.astype(np.float64) - w).max(initial=0)), 0.0
    rtol = rtol_for(w.dtype, tolerance.rtol)
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    finite = np.isfinite(w64) & np.isfinite(g64)
    with np.errstate(invalid="ignore"):  # inf - inf, masked out by finite
        err = np.where(finite, np.abs(g64 - w64), 0.0)
    scale = np.abs(w64[np.isfinite(w64)]).max(initial=0.0)
    close = (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
    bound = scale + np.abs(w64)
    close |= finite & (err <= rtol * bound)
    rel = np.divide(err, bound, out=np.zeros_like(err), where=bound > 0)
    return ~close, float(err.max(initial=0.0)), float(rel.max(initial=0.0))


@dataclass(frozen=True)
class Requirements:
    """What a workload needs of a device."""

    #: ``"gpu"``, ``"cpu"`` or ``"any"``.
    device: str = "any"
    #: Whether it needs subgroup operations.
    subgroups: bool = False
    #: Minimum device limits by name (``Device.info["limits"]``), e.g.
    #: ``{"max_workgroup_storage_bytes": 16384}``.
    limits: dict[str, int] = field(default_factory=dict)

    def unmet(self, info: dict[str, Any]) -> list[str]:
        """What ``info`` (``Device.info``) lacks, one line each."""
        kind = "cpu" if info["backend"] == "cpu" else "gpu"
        problems = []
        if self.device not in ("any", kind):
            problems.append(f"needs a {self.device} device, this one is a {kind}")
        if self.subgroups and "subgroup" not in info["features"]:
            problems.append("needs subgroup operations, which the device lacks")
        for name, least in self.limits.items():
            have = info["limits"].get(name)
            if have is not None and have < least:
                problems.append(f"needs {name} >= {least}, the device has {have}")
        return problems


class Workload:
    """A problem of fixed sizes. Subclasses set :attr:`name` and
    :attr:`defaults` (every size or option with its default value) and
    implement :meth:`fusion`; the rest is optional."""

    #: The workload's name; with the sizes it makes the :attr:`key`.
    name: str = "workload"
    #: Every size and option the constructor accepts, with its default.
    defaults: ClassVar[dict[str, Size]] = {}
    #: A one-line description (``tilefuse.workloads.names()`` lists it).
    summary: ClassVar[str] = ""
    tolerance: Tolerance = Tolerance()
    #: Sizes the :attr:`key` names only where they differ from their
    #: default: options added after keys were in use (a built-in workload's
    #: ``dtype``), so that journals and results keyed before still match.
    implicit: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **sizes: Size) -> None:
        unknown = sorted(set(sizes) - set(self.defaults))
        if unknown:
            known = ", ".join(self.defaults) or "none"
            raise TypeError(f"workload {self.name}: unknown size {unknown[0]!r} (sizes: {known})")
        self.sizes: dict[str, Size] = dict(self.defaults)
        for key, value in sizes.items():
            self.sizes[key] = _checked_size(self.name, key, value, self.defaults[key])
        self._payload: Fusion | None = None
        self._inputs: dict[int, tuple[np.ndarray, ...]] = {}
        self._expected: dict[int, tuple[np.ndarray, ...]] = {}

    def fusion(self) -> Fusion:
        """The payload: a new fusion of this problem's sizes."""
        raise NotImplementedError(f"workload {self.name} defines no fusion()")

    def size(self, key: str) -> int:
        """The integer size ``key`` (``TypeError`` for an option that is a
        string or a flag)."""
        value = self.sizes[key]
        if type(value) is not int:
            raise TypeError(f"workload {self.name}: {key} is {value!r}, not an integer size")
        return value

    @property
    def payload(self) -> Fusion:
        """:meth:`fusion`, built once."""
        if self._payload is None:
            self._payload = self.fusion()
        return self._payload

    @property
    def key(self) -> str:
        """Stable across processes: the name and every size, e.g.
        ``softmax(cols=4096,rows=4096)``; a size in :attr:`implicit` only
        where it differs from its default (``softmax(cols=64,dtype=bf16,rows=8)``)."""
        shown = (
            (k, v)
            for k, v in sorted(self.sizes.items())
            if k not in self.implicit or v != self.defaults[k]
        )
        return f"{self.name}({','.join(f'{k}={v}' for k, v in shown)})"

    @property
    def label(self) -> str:
        """Shorter than the key, for tables: the sizes that differ from
        their defaults, e.g. ``softmax(rows=256)``."""
        changed = [f"{k}={v}" for k, v in self.sizes.items() if v != self.defaults.get(k)]
        return f"{self.name}({','.join(changed)})"

    def inputs(self, seed: int = 0) -> tuple[np.ndarray, ...]:
        """Random inputs, the same for the same seed, made once per seed
        and read-only (runs share them)."""
        if seed not in self._inputs:
            arrays = tuple(np.asarray(a) for a in self.make_inputs(np.random.default_rng(seed)))
            for a in arrays:
                a.flags.writeable = False
            self._inputs[seed] = arrays
        return self._inputs[seed]

    def make_inputs(self, rng: np.random.Generator) -> Sequence[np.ndarray]:
        """One array per fusion input: floats uniform in [-1, 1), small
        integers, random masks. Override for inputs with a domain (e.g.
        positive values for ``log``)."""
        return [_random(rng, t.shape, t.dtype) for t in self.payload.inputs]

    def reference(self, *inputs: np.ndarray) -> Any:
        """The outputs ``inputs`` must give (one array or a tuple): by
        default the reference evaluator's (float64 math, rounded once per
        op). Override with numpy to check against another implementation."""
        return self.payload.evaluate(*inputs)

    def expected(self, seed: int = 0) -> tuple[np.ndarray, ...]:
        """:meth:`reference` of :meth:`inputs` for ``seed``, computed once."""
        if seed not in self._expected:
            outs = self.reference(*self.inputs(seed))
            self._expected[seed] = tuple(outs) if isinstance(outs, tuple) else (outs,)
        return self._expected[seed]

    def complexity(self) -> Complexity:
        """Flops and bytes of one run, counted from the fusion by default."""
        return self.payload.complexity()

    def requirements(self) -> Requirements:
        """What the workload needs of a device (nothing by default)."""
        return Requirements()

    def numpy(self, *inputs: np.ndarray) -> Any:
        """The same computation written with numpy, as a user would, for
        speedups over numpy; ``NotImplementedError`` when there is none."""
        raise NotImplementedError(f"workload {self.name} has no numpy form")

    @property
    def has_numpy(self) -> bool:
        return type(self).numpy is not Workload.numpy

    def __repr__(self) -> str:
        return f"<Workload {self.key}>"


def _checked_size(workload: str, key: str, value: Any, default: Size) -> Size:
    """``value`` if it has the default's type (and an int size is > 0)."""
    want = type(default)
    if isinstance(value, np.integer) and want is int:
        value = int(value)
    if type(value) is not want:
        kind = {int: "an integer", bool: "True or False", str: "a string"}[want]
        raise TypeError(f"workload {workload}: size {key} must be {kind}, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
        raise ValueError(f"workload {workload}: size {key} must be positive, got {value}")
    return value


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype in ("f32", "f16", "bf16"):
        return rng.uniform(-1.0, 1.0, shape).astype(NUMPY_DTYPES[dtype])
    if dtype == "i32":
        return rng.integers(-8, 8, shape, dtype=np.int32)
    if dtype == "u32":
        return rng.integers(0, 16, shape, dtype=np.uint32)
    return rng.random(shape) < 0.5


# The registry of workloads by name; `tilefuse.workloads` registers the
# built-in ones when the package is imported.
_REGISTRY: dict[str, type[Workload]] = {}

W = TypeVar("W", bound=type[Workload])


def register(cls: W) -> W:
    """Adds a workload class under its ``name`` (a class decorator)."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"a workload named {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Every registered workload, sorted."""
    return sorted(_REGISTRY)


def describe(name: str) -> str:
    """One line: what the workload computes and its sizes with defaults."""
    cls = _lookup(name)
    sizes = ", ".join(f"{k}={v!r}" for k, v in cls.defaults.items())
    return f"{cls.summary} ({sizes})"


def get(name: str, **sizes: Size) -> Workload:
    """The workload ``name`` with ``sizes`` (the rest at their defaults)."""
    return _lookup(name)(**sizes)


def _lookup(name: str) -> type[Workload]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown workload {name!r}; built in: {', '.join(names())}")
    return _REGISTRY[name]


class FusionWorkload(Workload):
    """A fixed fusion as a workload (what :func:`as_workload` makes of a
    fusion, a function or a JSON file)."""

    def __init__(self, fusion: Fusion, name: str) -> None:
        super().__init__()
        self._fusion = fusion
        self.name = name

    @property
    def key(self) -> str:
        """The name and the fusion's fingerprint."""
        return f"{self.name}@{self._fusion.fingerprint[:16]}"

    def fusion(self) -> Fusion:
        return self._fusion


#: What :func:`as_workload` accepts.
WorkloadLike: TypeAlias = "Workload | Fusion | Callable[..., Fusion] | str | os.PathLike[str]"


def as_workload(obj: WorkloadLike, **sizes: Size) -> Workload:
    """A workload from a :class:`Workload` (returned as is), a
    :class:`~tilefuse.Fusion`, a function returning one (called with
    ``sizes``), the path of a fusion JSON file, or the name of a built-in
    workload (``"softmax"``, with ``sizes``; a file of that name wins)."""
    if isinstance(obj, Workload):
        return obj
    if isinstance(obj, Fusion):
        return FusionWorkload(obj, "fusion")
    if isinstance(obj, str | os.PathLike):
        path = Path(obj)
        if isinstance(obj, str) and not path.exists():
            return _builtin(obj, sizes)
        return FusionWorkload(Fusion.from_json(path.read_text()), path.stem)
    if callable(obj):
        fusion = _call(obj, sizes)
        return FusionWorkload(fusion, getattr(obj, "__name__", "function"))
    raise TypeError(
        "expected a Workload, a Fusion, a function returning one or a fusion JSON path, "
        f"got {type(obj).__name__}"
    )


def _builtin(name: str, sizes: dict[str, Size]) -> Workload:
    if name not in _REGISTRY:
        raise FileNotFoundError(
            f"no fusion file {name!r}, nor a built-in workload of that name "
            f"(built in: {', '.join(names())})"
        )
    return get(name, **sizes)


def _call(fn: Callable[..., Any], sizes: dict[str, Size]) -> Fusion:
    fusion = fn(**sizes)
    if not isinstance(fusion, Fusion):
        name = getattr(fn, "__name__", "function")
        raise TypeError(f"workload function {name} returned {type(fusion).__name__}, not a Fusion")
    return fusion
