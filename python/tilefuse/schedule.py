"""Manual scheduling, devices and compiled kernels (TensorIR's model).

    s = f.create_schedule()
    b = s.get_block("e")
    i, j = s.get_loops(b)
    jo, ji = s.split(j, [None, 256], names=["jo", "ji"])
    s.bind(i, "workgroup.x"); s.bind(ji, "invocation.x")
    k = s.build(tilefuse.Device.default())
    y = k(x)

Every primitive checks its preconditions and raises ``ScheduleError``
naming the block or loop; every applied primitive is recorded in
``s.trace`` (JSON), which ``Schedule.replay`` applies to a fresh schedule.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _native
from ._args import int64s
from .device import Device, DeviceName, as_device

if TYPE_CHECKING:
    from .fusion import Fusion

__all__ = ["Block", "Kernel", "Loop", "Schedule", "Timing"]


class Block:
    """A block of a schedule (one computation), found by name."""

    __slots__ = ("id", "schedule")

    def __init__(self, schedule: Schedule, id: int) -> None:
        self.schedule = schedule
        self.id = id

    @property
    def name(self) -> str:
        return self.schedule._native.block_name(self.id)

    def __repr__(self) -> str:
        return f"Block({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Block) and (other.schedule, other.id) == (self.schedule, self.id)

    def __hash__(self) -> int:
        return hash((id(self.schedule), self.id))


class Loop:
    """A loop of a schedule. Loops replaced by a primitive (the loop that
    ``split`` splits, the loops ``fuse`` fuses) can no longer be used."""

    __slots__ = ("id", "schedule")

    def __init__(self, schedule: Schedule, id: int) -> None:
        self.schedule = schedule
        self.id = id

    def _info(self) -> tuple[str, int, str]:
        info = self.schedule._native.loop_info(self.id)
        if info is None:
            raise _native.ScheduleError(f"loop #{self.id} does not exist")
        return info

    @property
    def name(self) -> str:
        return self._info()[0]

    @property
    def extent(self) -> int:
        return self._info()[1]

    @property
    def kind(self) -> str:
        """``serial``, ``parallel``, ``vectorized``, ``unrolled``, a thread
        axis such as ``workgroup.x``, or for a pipelined loop e.g.
        ``pipelined: 3 stages, copies 1 ahead``."""
        return self._info()[2]

    def __repr__(self) -> str:
        name, extent, kind = self._info()
        return f"Loop({name}, extent={extent}, {kind})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Loop) and (other.schedule, other.id) == (self.schedule, self.id)

    def __hash__(self) -> int:
        return hash((id(self.schedule), self.id))


class Schedule:
    """A fusion's loop-nest kernel under transformation."""

    __slots__ = ("_native", "fusion")

    def __init__(self, fusion: Fusion) -> None:
        self.fusion = fusion
        self._native = _native.Schedule(fusion._native)

    @classmethod
    def replay(cls, fusion: Fusion, trace: str) -> Schedule:
        """Applies a trace (``s.trace``) to a fresh schedule of ``fusion``."""
        s = cls.__new__(cls)
        s.fusion = fusion
        s._native = _native.Schedule.replay(fusion._native, trace)
        return s

    # --- lookup -------------------------------------------------------------
    def get_block(self, name: str) -> Block:
        """The block computing the tensor named ``name`` (``op_N`` for an
        unnamed tensor ``N``)."""
        return Block(self, self._native.get_block(_text("get_block", "name", name)))

    def get_blocks(self) -> list[Block]:
        return [Block(self, b) for b in self._native.get_blocks()]

    def get_loops(self, block: Block | str) -> list[Loop]:
        """The loops around ``block``, outermost first."""
        return [Loop(self, i) for i in self._native.get_loops(self._block(block, "get_loops"))]

    # --- primitives -----------------------------------------------------------
    def split(
        self, loop: Loop, factors: list[int | None], names: list[str] | None = None
    ) -> list[Loop]:
        """Splits ``loop`` into nested loops of the given extents (outermost
        first); one factor may be ``None`` (inferred). Tails are guarded."""
        given = [
            f if f is None else int64s("split factors", [f], _native.ScheduleError)[0]
            for f in _sequence("split", "factors", factors)
        ]
        if names is not None:
            names = [_text("split", "names", n) for n in _sequence("split", "names", names)]
        new = self._native.split(self._loop(loop, "split"), given, names)
        return [Loop(self, i) for i in new]

    def fuse(self, *loops: Loop) -> Loop:
        """Fuses directly nested loops into one."""
        return Loop(self, self._native.fuse([self._loop(lp, "fuse") for lp in loops]))

    def reorder(self, *loops: Loop | Sequence[Loop]) -> None:
        """Puts loops of one single-child chain into the given order
        (``s.reorder(a, b)`` or ``s.reorder([a, b])``)."""
        if len(loops) == 1 and isinstance(loops[0], Sequence):
            loops = tuple(loops[0])
        self._native.reorder([self._loop(lp, "reorder") for lp in loops])

    def bind(self, loop: Loop, axis: str) -> None:
        """Binds a loop to ``workgroup.{x,y,z}`` or ``invocation.{x,y,z}``.

        A loop that carries a reduction (e.g. the combining loop ``rfactor``
        leaves) may be bound to ``invocation.x``: its terms are then
        combined across invocations, folded as a tree where they sit in a
        workgroup buffer (``rfactor`` partials set to workgroup scope),
        else with subgroup shuffles (which must fit in the device's
        smallest subgroup). It must hold only the reducing block (or serial
        or unrolled loops over the block's rows, each holding only the next:
        a tree then folds all those rows at each step, one barrier per step
        for all of them) and span the workgroup's size along its axis, a
        power of two."""
        self._native.bind(self._loop(loop, "bind"), _text("bind", "axis", axis))

    def parallel(self, loop: Loop) -> None:
        self._native.parallel(self._loop(loop, "parallel"))

    def vectorize(self, loop: Loop) -> None:
        self._native.vectorize(self._loop(loop, "vectorize"))

    def unroll(self, loop: Loop) -> None:
        """Copies ``loop``'s body out once per iteration in WGSL (at most 256
        iterations: split longer loops first). Nested unrolled loops
        multiply; a GPU build refuses a stage of more than 4096 blocks
        copied out, or of more than 1 MiB of WGSL (a ``DeviceError``),
        which shader compilers would take minutes over. The CPU device runs
        unrolled loops as loops."""
        self._native.unroll(self._loop(loop, "unroll"))

    def pipeline(self, loop: Loop, stages: int = 2, prefetch_gap: int = 1) -> None:
        """Software-pipelines ``loop`` (nvFuser's circular buffering): the
        copies at the front of its body (``cache_read`` blocks computed at
        it) write into ``stages`` rotating buffers and run ``prefetch_gap``
        iterations ahead of their use, a prologue filling the first
        stages; a workgroup then needs one barrier per iteration instead of
        two. Lowered after buffer realization; the sequential meaning is
        unchanged, so it runs on the CPU device too."""
        self._native.pipeline(
            self._loop(loop, "pipeline"),
            _count("pipeline", "stages", stages),
            _count("pipeline", "prefetch_gap", prefetch_gap),
        )

    def rfactor(self, loop: Loop) -> Block:
        """Makes the reduction under ``loop`` spatial over it: a block
        ``B_rf`` reduces into a buffer with one partial result per
        iteration of ``loop`` (which may then be parallelized or bound), and
        the block ``B`` combines the partials. Returns ``B_rf``."""
        return Block(self, self._native.rfactor(self._loop(loop, "rfactor")))

    def decompose_reduction(self, block: Block | str, loop: Loop) -> Block:
        """Moves the reduction's start from the identity into a block placed
        just before ``loop`` (the outermost loop of the reduction), so the
        reduction itself only accumulates. Returns the new block."""
        p = "decompose_reduction"
        new = self._native.decompose_reduction(self._block(block, p), self._loop(loop, p))
        return Block(self, new)

    def compute_at(self, block: Block | str, loop: Loop) -> None:
        """Moves a producer under ``loop``, computing at each iteration only
        the region the blocks under ``loop`` read."""
        self._native.compute_at(self._block(block, "compute_at"), self._loop(loop, "compute_at"))

    def reverse_compute_at(self, block: Block | str, loop: Loop) -> None:
        """Moves a consumer under its producer's ``loop``, consuming at each
        iteration the region just produced (which must be dense: writes
        with gaps, a strided walk, are refused)."""
        p = "reverse_compute_at"
        self._native.reverse_compute_at(self._block(block, p), self._loop(loop, p))

    def cache_read(self, block: Block | str, buffer: str, scope: str) -> Block:
        """Makes ``block`` read ``buffer`` through a copy in ``scope``
        (``"workgroup"``, ``"private"`` or ``"global"``); returns the copy
        block, to place with ``compute_at``."""
        p = "cache_read"
        buffer, scope = _text(p, "buffer", buffer), _text(p, "scope", scope)
        return Block(self, self._native.cache_read(self._block(block, p), buffer, scope))

    def cache_write(self, block: Block | str, scope: str) -> Block:
        """Makes ``block`` write into a copy in ``scope``; returns the block
        that copies it out, to place with ``reverse_compute_at``."""
        p = "cache_write"
        new = self._native.cache_write(self._block(block, p), _text(p, "scope", scope))
        return Block(self, new)

    def set_scope(self, block: Block | str, scope: str) -> None:
        """Moves the intermediate ``block`` writes to ``scope``
        (``"workgroup"``, ``"private"`` or ``"global"``); it is sized to
        what its users share when the kernel is built."""
        p = "set_scope"
        self._native.set_scope(self._block(block, p), _text(p, "scope", scope))

    def compute_inline_all(self, keep: Sequence[Block | str] = ()) -> list[str]:
        """Inlines every block ``compute_inline`` accepts, except ``keep``;
        returns their names (reductions, outputs and the like stay). A block
        whose inlined expression would nest more than 128 levels deep stays
        too, writing its buffer, so that a chain of thousands of ops
        becomes a few hundred ops a block."""
        p = "compute_inline_all"
        ids = self._native.compute_inline_all(
            [self._block(b, p) for b in _sequence(p, "keep", keep)]
        )
        return [Block(self, i).name for i in ids]

    def compute_inline(self, block: Block | str) -> None:
        """Folds a pointwise producer into every block that reads it
        (refused where an expression would then nest more than 256 levels
        deep: every pass over the kernel walks expressions recursively)."""
        self._native.compute_inline(self._block(block, "compute_inline"))

    def reverse_compute_inline(self, block: Block | str) -> None:
        """Folds a pointwise consumer into the block that produces its input."""
        self._native.reverse_compute_inline(self._block(block, "reverse_compute_inline"))

    # --- output ---------------------------------------------------------------
    @property
    def trace(self) -> str:
        """Every applied primitive, as JSON."""
        return self._native.trace()

    @property
    def recorded_fusion(self) -> Fusion:
        """The fusion the trace replays on: ``self.fusion``, or for an
        automatic scheduler's schedule the canonical form it scheduled
        (the same inputs and outputs)."""
        return type(self.fusion)._from_native(self._native.fusion())

    def trace_as_python(self) -> str:
        """Every applied primitive as a runnable Python script: run with
        ``f`` bound to :attr:`recorded_fusion`, it leaves in ``s`` the same
        schedule. For reading what a scheduler did and editing it by
        hand."""
        return self._native.trace_as_python()

    def lower(self, device: Device | DeviceName | None = None) -> list[tuple[str, str]]:
        """Every lowering pass ``device`` (a :class:`Device` or its
        name, see :func:`as_device`) runs on this schedule before code generation, in order:
        ``[(pass name, the kernel and what the analyses found after it),
        ...]``. For reading what happens between scheduling and code; a
        pass that cannot lower the schedule raises ``ScheduleError`` with
        ``.lowering_pass`` set. ``TILEFUSE_DUMP=lower`` prints the same to
        stderr on every build."""
        device = as_device(device)
        return self._native.lower(device._native)

    def build(self, device: Device | DeviceName | None = None) -> Kernel:
        """Compiles for ``device`` (a :class:`Device` or its name, see
        :func:`as_device`; the default device when omitted)."""
        device = as_device(device)
        return Kernel(self._native.build(device._native), device, self)

    def __reduce__(self) -> tuple[Any, ...]:
        # A schedule is its fusion and its trace: pickling replays the trace
        # on the fusion it was recorded on (an automatic scheduler's may be
        # the canonical form of self.fusion, with the same inputs and outputs).
        return (Schedule.replay, (self.recorded_fusion, self.trace))

    def __str__(self) -> str:
        return str(self._native)

    def __repr__(self) -> str:
        return f"<Schedule of {len(self.get_blocks())} blocks>"

    def _block(self, block: object, primitive: str) -> int:
        if isinstance(block, str):
            return self._native.get_block(block)
        if not isinstance(block, Block):
            got = type(block).__name__
            raise _native.ScheduleError(
                f"{primitive}: block: expected a Block of this schedule or a name, got {got}"
            )
        self._owned(block)
        return block.id

    def _loop(self, loop: object, primitive: str) -> int:
        if not isinstance(loop, Loop):
            got = type(loop).__name__
            raise _native.ScheduleError(
                f"{primitive}: loop: expected a Loop of this schedule, got {got}"
            )
        self._owned(loop)
        return loop.id

    def _owned(self, item: Block | Loop) -> None:
        if item.schedule is not self:
            raise _native.ScheduleError(f"{item!r} belongs to another schedule")


#: The largest count a primitive takes (the native layer's u32).
_MAX_COUNT = 2**32 - 1


def _count(primitive: str, name: str, value: object) -> int:
    """``value`` as a count for ``primitive``'s argument ``name``, else a
    ``ScheduleError`` naming both (never a bare ``OverflowError``)."""
    what = f"{primitive}: {name}"
    (count,) = int64s(what, [value], _native.ScheduleError)
    if not 0 <= count <= _MAX_COUNT:
        raise _native.ScheduleError(
            f"{what}: expected an integer from 0 to {_MAX_COUNT}, got {count}"
        )
    return count


def _text(primitive: str, name: str, value: object) -> str:
    if not isinstance(value, str):
        got = type(value).__name__
        raise _native.ScheduleError(f"{primitive}: {name}: expected a string, got {got}")
    return value


def _sequence(primitive: str, name: str, value: object) -> Sequence[Any]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        got = type(value).__name__
        raise _native.ScheduleError(f"{primitive}: {name}: expected a list, got {got}")
    return value


@dataclass(frozen=True)
class Timing:
    """Seconds per launch."""

    median: float
    min: float
    max: float
    samples: list[float]


def _binding_bytes(binding: dict[str, Any]) -> int:
    """Bytes of an exported binding's buffer: 4 an element, or 2 for halves
    in their own layout, in whole 4-byte words either way."""
    n: int = max(1, math.prod(binding["shape"]))
    if binding["dtype"] in ("f16", "bf16") and binding["storage"] != "f32":
        return 4 * -(-n // 2)
    return 4 * n


class Kernel:
    """A compiled schedule. Call it with numpy arrays; read its WGSL,
    bindings and dispatches to run it on any WebGPU host."""

    __slots__ = ("_native", "device", "schedule")

    def __init__(
        self, native: _native.Kernel, device: Device, schedule: Schedule | None = None
    ) -> None:
        self._native = native
        self.device = device
        #: The schedule the kernel was built from.
        self.schedule = schedule

    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        """Runs the kernel on ``arrays`` (one per fusion input) and returns
        its output, or a tuple of them.

        C-contiguous arrays of an input's dtype are read where they lie;
        other layouts are copied once. ``out`` (an array, or a tuple with
        an array or ``None`` per output) receives the results in place: each
        array must have the output's shape and dtype and be C-contiguous
        and writeable; one that overlaps an input gets the result copied in
        after the kernel ran. The GIL is released while the kernel runs."""
        outs = self._native.run(*map(np.asarray, arrays), out=out)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def benchmark(self, *arrays: Any, warmup: int = 3, repeat: int = 20) -> Timing:
        """Times ``repeat`` launches after ``warmup`` (GPU timestamps when
        the adapter has them, host time otherwise). On a GPU a warm-up
        (``warmup > 0``) lasts at least 0.2 s: an idle discrete GPU runs at
        a fraction of its clock until it has been busy a while;
        ``warmup=0`` times at once (for timing in chunks after one
        warm-up, as :func:`tilefuse.timing.interleave` does)."""
        counts = dict(zip(("warmup", "repeat"), int64s("benchmark", (warmup, repeat)), strict=True))
        for name, value in counts.items():
            if value < 0:
                raise ValueError(f"benchmark: {name} must not be negative, got {value}")
        median, lo, hi, samples = self._native.benchmark(*(np.asarray(a) for a in arrays), **counts)
        return Timing(median, lo, hi, samples)

    def __repr__(self) -> str:
        def side(role: str) -> str:
            found = sorted((b for b in self.bindings if b["role"] == role), key=itemgetter("index"))
            return ", ".join(f"{b['name']}: {b['dtype']}{list(b['shape'])}" for b in found)

        n = len(self.dispatch)
        return (
            f"<Kernel ({side('input')}) -> ({side('output')}) on {self.device.info['name']}, "
            f"{n} dispatch{'es' if n > 1 else ''}>"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its schedule (fusion + trace) on the same kind of device.
        if self.schedule is None:
            raise TypeError("this Kernel has no schedule to rebuild it from; pickle its Schedule")
        return (Schedule.build, (self.schedule, self.device))

    def export(self, directory: str | os.PathLike[str], name: str = "kernel") -> Path:
        """Writes the kernel as files any WebGPU host can run:
        ``<name>.wgsl`` and ``<name>.json``, which holds ``bindings``
        (binding, name, dtype, storage type, shape, byte size, access, role
        and input/output index; ``bool`` is stored as ``u32``) and
        ``dispatch`` (one entry per stage, in order: entry point, workgroup
        count, workgroup size, bindings used; bind each stage's group 0 with
        just those) and ``features``, the WebGPU features to request (see
        :attr:`features`). Halves are two bytes each, as numpy lays them
        out: ``storage`` ``"u32"`` holds two to a word, lane 0 the low
        half; ``"f16"`` one each. Returns the JSON's path."""
        if not name.isidentifier():
            raise ValueError(f"export: name must be an identifier, got {name!r}")
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        source = self.wgsl
        wgsl = folder / f"{name}.wgsl"
        wgsl.write_text(source)
        bindings = [{**b, "bytes": _binding_bytes(b)} for b in self.bindings]
        manifest = {
            "format": "tilefuse.kernel",
            "version": 1,
            "wgsl": wgsl.name,
            "features": self.features,
            "fusion": None if self.schedule is None else self.schedule.fusion.fingerprint,
            "bindings": bindings,
            "dispatch": self.dispatch,
        }
        path = folder / f"{name}.json"
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        return path

    @property
    def wgsl(self) -> str:
        """The kernel as a WGSL module. A CPU kernel makes it on first use
        and raises ``ScheduleError`` when its schedule has no WGSL form
        (the CPU runs nests WGSL cannot express)."""
        return self._native.wgsl

    @property
    def features(self) -> list[str]:
        """The WebGPU features a host must request for :attr:`wgsl`:
        ``"subgroups"`` where it calls subgroup builtins, ``"shader-f16"``
        where it holds f16 inputs or outputs as ``array<f16>`` (a GPU
        kernel does on devices with the feature; a CPU kernel's WGSL never
        does, so that any WebGPU host runs it)."""
        return self._native.features

    @property
    def bindings(self) -> list[dict[str, Any]]:
        """Binding index → buffer name, dtype, storage type, shape, access,
        role (input / output / temp) and input or output index."""
        return self._native.bindings

    @property
    def dispatch(self) -> list[dict[str, Any]]:
        """One entry per dispatch, in order: entry point, workgroup count,
        workgroup size and the bindings it uses."""
        return self._native.dispatch
