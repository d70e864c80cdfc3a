"""The fusion builder over ``tilefuse._native.Fusion``; its tensors are
:mod:`tilefuse.tensor`'s.

    f = Fusion()
    x = f.input((4, 8), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    f.output(e / e.sum(axis=1, keepdims=True))
    f.evaluate(np.random.rand(4, 8).astype(np.float32))
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import _native
from ._args import int64s
from ._native import FusionError
from .tensor import DTypeLike, Scalar, Tensor, _dtype_name

if TYPE_CHECKING:
    from .complexity import Complexity
    from .device import Device, DeviceName
    from .params import HeuristicParams
    from .schedule import Kernel, Schedule
    from .segments import Segment, SegmentedKernel

__all__ = ["Fusion"]


class Fusion:
    """A fusion under construction: a verified DAG of tensor ops."""

    __slots__ = ("_native",)

    @classmethod
    def _from_native(cls, native: _native.Fusion) -> Fusion:
        """A fusion of this class around a native one (parsed, or a
        segment's or a scheduler's canonical form)."""
        f = cls.__new__(cls)
        f._native = native
        return f

    def __init__(self) -> None:
        self._native = _native.Fusion()

    def input(
        self, shape: Sequence[int], dtype: DTypeLike = "f32", *, name: str | None = None
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

    def to_json(self, *, indent: int | None = None) -> str:
        """The fusion as JSON (:meth:`from_json` reads it back): one line,
        or indented by ``indent`` spaces, as :func:`json.dumps` takes it."""
        text: str = self._native.to_json(False)
        return text if indent is None else json.dumps(json.loads(text), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Fusion:
        return cls._from_native(_native.Fusion.from_json(text))

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
                Fusion._from_native(native),
                scheduler,
                [Tensor(self, i) for i in inputs],
                [Tensor(self, i) for i in outputs],
            )
            for native, scheduler, inputs, outputs in _native.segments(self._native)
        ]

    def heuristics(
        self,
        scheduler: str | None = None,
        device: Device | DeviceName | None = None,
        *,
        cache: bool = True,
    ) -> HeuristicParams | list[HeuristicParams]:
        """The params for this fusion on ``device`` (a :class:`Device` or
        ``"cpu"`` / ``"gpu"``; the default device when omitted): a tuned
        winner from the heuristic cache when it has one, else a learned
        heuristic's pick (see :mod:`tilefuse.learn`; neither with
        ``cache=False``), else the default heuristic's (see
        :meth:`params_source`). One params object, or one per segment (see
        :meth:`segments`) when no scheduler takes the whole fusion."""
        from . import cache as _cache
        from .device import as_device
        from .params import HeuristicParams

        _refuse_device("heuristics", "scheduler", scheduler)
        device = as_device(device)
        if scheduler is None and self._segmented():
            return [
                cast("HeuristicParams", seg.fusion.heuristics(seg.scheduler, device, cache=cache))
                for seg in self.segments()
            ]
        entry = _cache.lookup(self, device, scheduler) if cache else None
        if entry is not None:
            return HeuristicParams._from_native(entry["params"])
        pick = _cache.learned(self, device, scheduler) if cache else None
        if pick is not None and pick["params"] is not None:
            return HeuristicParams._from_native(pick["params"])
        data = _native.heuristics(self._native, device._native, scheduler)
        return HeuristicParams._from_native(data)

    def params_source(
        self, device: Device | DeviceName | None = None, scheduler: str | None = None
    ) -> str:
        """Where :meth:`heuristics` takes this fusion's params from on
        ``device``: ``"cache: ..."`` or ``"bundle: ..."`` (with the tuning
        that made them, and whether it searched other fields or values than
        the tuner would now) or ``"default heuristic"``; per segment, joined
        by ``"; "``."""
        from . import cache as _cache
        from .device import as_device

        device = as_device(device)
        if scheduler is None and self._segmented():
            return "; ".join(
                seg.fusion.params_source(device, seg.scheduler) for seg in self.segments()
            )
        return _cache.source(self, device, scheduler)

    def features(self) -> dict[str, Any]:
        """What seed heuristics decide on, as the scheduler that takes the
        fusion sees it: ``{"scheduler", "compute_ops", "matmul": [m, n, k]
        or None, "reduction": {"outer", "reduced", "inner"} or None}``
        (``inner == 1`` for a reduction along the fastest axis)."""
        return _native.features(self._native)

    def tunables(
        self, scheduler: str | None = None, device: Device | DeviceName | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """The params fields a tuner may set when ``scheduler`` (the first
        that takes this fusion when omitted) schedules it for ``device``
        (a :class:`Device` or its name; the default when omitted): ``(scheduler, [{"path":
        "tile_sizes.cta_tile.m", "domain": {...}, "values": [...]}, ...])``.
        Every value either schedules or is refused with ``ParamsError``
        (some act only with another field set, as circular buffering needs
        staged operands)."""
        from .device import as_device

        _refuse_device("tunables", "scheduler", scheduler)
        device = as_device(device)
        return _native.tunables(self._native, device._native, scheduler)

    def schedule(
        self,
        params: HeuristicParams
        | dict[str, Any]
        | Sequence[HeuristicParams | dict[str, Any]]
        | None = None,
        device: Device | DeviceName | None = None,
    ) -> Kernel | SegmentedKernel:
        """Schedules with ``params`` and compiles for ``device``; the kernel's
        ``.schedule`` shows the loop nest and trace the scheduler made. A
        list (one params object per segment) schedules each segment and
        returns a :class:`SegmentedKernel`. A dict (``to_dict()``'s form,
        with its ``"scheduler"`` tag) works wherever a params object does.
        Without ``params``, the default heuristic's for ``device`` (params
        picked for one device kind run anywhere, but are tuned for theirs:
        ``f.heuristics()`` without a device picks the default device's)."""
        from .device import as_device
        from .params import HeuristicParams
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
        device: Device | DeviceName | None = None,
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


def _refuse_device(method: str, arg: str, value: object) -> None:
    """A device given where ``method`` takes ``arg`` first (as
    ``f.heuristics(device)`` would give it) is a clear TypeError, not a
    confusing one from deeper down."""
    if value is None:  # the usual case, on the path of every heuristics() call
        return
    from .device import DeviceFacts

    if isinstance(value, DeviceFacts) or (isinstance(value, str) and value in ("cpu", "gpu")):
        raise TypeError(
            f"{method}(): {arg} got a device ({value!r}); pass it by keyword: {method}(device=...)"
        )
