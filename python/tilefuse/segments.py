"""Segmented fusions: parts that one scheduler each accepts, run in order.

``Fusion.segments()`` shows the parts; ``Fusion.heuristics()`` returns one
params object per segment for such a fusion and ``Fusion.schedule()`` takes
them back, returning a :class:`SegmentedKernel`.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .device import Device
    from .fusion import Fusion
    from .schedule import Kernel
    from .tensor import Tensor

__all__ = ["Segment", "SegmentedKernel"]


@dataclass(frozen=True)
class Segment:
    """One part of a fusion, as a fusion of its own."""

    #: The part as a fusion of its own (its inputs and outputs are the
    #: parent tensors below, in order).
    fusion: Fusion
    #: The scheduler that takes it.
    scheduler: str
    #: The parent fusion's tensors feeding its inputs.
    inputs: list[Tensor]
    #: The parent fusion's tensors it computes for later segments or as
    #: results.
    outputs: list[Tensor]

    def __repr__(self) -> str:
        ins = ", ".join(t.name or f"t{t.id}" for t in self.inputs)
        outs = ", ".join(t.name or f"t{t.id}" for t in self.outputs)
        return f"<Segment {self.scheduler}: ({ins}) -> ({outs}), {len(self.fusion)} tensors>"


class SegmentedKernel:
    """The kernels of a segmented fusion, called like one kernel: each
    segment's kernel runs in order, fed by the inputs and by earlier
    segments' outputs. On a GPU they run as one submission and the
    intermediates stay on the device; on the CPU they are numpy arrays
    passed from kernel to kernel without copies."""

    __slots__ = ("_sequence", "device", "fusion", "kernels", "outputs", "segments")

    def __init__(
        self,
        fusion: Fusion,
        segments: list[Segment],
        kernels: list[Kernel],
        device: Device,
        outputs: list[Tensor] | None = None,
    ) -> None:
        self.fusion = fusion
        self.segments = segments
        self.kernels = kernels
        self.device = device
        #: The outputs when it was scheduled (outputs added to the fusion
        #: later are not computed by these kernels).
        self.outputs = fusion.outputs if outputs is None else outputs
        self._sequence = None
        if device.is_gpu:
            from . import _native

            wiring = [([t.id for t in s.inputs], [t.id for t in s.outputs]) for s in segments]
            self._sequence = _native.KernelSequence(
                fusion._native,
                [k._native for k in kernels],
                wiring,
                [t.id for t in self.outputs],
            )

    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        """Runs each segment's kernel in order; ``out`` as for
        :meth:`Kernel.__call__` (an output array is written by the segment
        that computes it)."""
        if self._sequence is not None:
            results = tuple(self._sequence.run(*map(np.asarray, arrays), out=out))
        else:
            results = self._run_in_turn(arrays, out)
        return results[0] if len(results) == 1 else results

    def _run_in_turn(self, arrays: tuple[Any, ...], out: Any) -> tuple[Any, ...]:
        """Each kernel on numpy arrays, the outputs of earlier ones passed
        on as they are (the CPU device reads them in place)."""
        from ._native import FusionError

        want = len(self.fusion.inputs)
        if len(arrays) != want:
            noun = "input" if want == 1 else "inputs"
            raise FusionError(f"the fusion takes {want} {noun}, got {len(arrays)}")
        targets = self._out_list(out) if out is not None else [None] * len(self.outputs)
        self._check_distinct(targets)
        values: dict[int, Any] = {
            t.id: np.asarray(a) for t, a in zip(self.fusion.inputs, arrays, strict=True)
        }
        outs = self._out_arrays(targets, list(values.values()))
        # An output that is an input is a copy of it, as a kernel's would be,
        # taken before a kernel writes an out array that aliases the input.
        inputs = {t.id for t in self.fusion.inputs}
        copies = [np.array(values[t.id]) if t.id in inputs else None for t in self.outputs]
        for segment, kernel in zip(self.segments, self.kernels, strict=True):
            given = tuple(outs.get(t.id) for t in segment.outputs)
            got = kernel(*(values[t.id] for t in segment.inputs), out=given)
            got = got if isinstance(got, tuple) else (got,)
            values.update((t.id, r) for t, r in zip(segment.outputs, got, strict=True))
        results = [
            values[t.id] if c is None else c for t, c in zip(self.outputs, copies, strict=True)
        ]
        # Outputs no segment computes (an input, or one listed twice).
        for target, result in zip(targets, results, strict=True):
            if target is not None and target is not result:
                np.copyto(target, result)
        return tuple(r if t is None else t for t, r in zip(targets, results, strict=True))

    def _check_distinct(self, targets: list[Any]) -> None:
        """Refuses ``out`` arrays that share memory, as kernels do."""
        from ._native import FusionError

        given = [(j, a) for j, a in enumerate(targets) if a is not None]
        for (i, a), (j, b) in itertools.combinations(given, 2):
            if np.shares_memory(a, b):
                label = self.fusion._native.label
                raise FusionError(
                    f"out {j} ({label(self.outputs[j].id)}) overlaps out {i} "
                    f"({label(self.outputs[i].id)}): each output needs memory of its own"
                )

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.fusion, self.segments, self.kernels, self.device, self.outputs)
        return (SegmentedKernel, args)

    def _out_list(self, out: Any) -> list[Any]:
        from ._native import FusionError

        listed = list(out) if isinstance(out, tuple) else [out]
        if len(listed) != len(self.outputs):
            raise FusionError(
                f"out: the fusion has {len(self.outputs)} outputs, got {len(listed)} arrays"
            )
        return listed

    def _out_arrays(self, targets: list[Any], inputs: list[Any]) -> dict[int, Any]:
        """The ``out`` array (of ``targets``, one per output or ``None``) of
        each output tensor a segment computes and writes in place. One that
        overlaps an input gets its result copied in after the last segment:
        a later segment may still read that input."""
        computed = {t.id for s in self.segments for t in s.outputs}
        arrays: dict[int, Any] = {}
        for t, target in zip(self.outputs, targets, strict=True):
            if target is None or t.id not in computed:
                continue
            if not any(np.shares_memory(target, a) for a in inputs):
                arrays.setdefault(t.id, target)
        return arrays

    def export(self, directory: str | os.PathLike[str], name: str = "kernel") -> Path:
        """Writes each segment's kernel as :meth:`Kernel.export` does
        (``<name>_<i>.wgsl`` and ``.json``) and ``<name>.json``, the
        sequence: the fusion's ``tensors`` (id, dtype, shape) a host
        allocates, its ``inputs`` and ``outputs`` (tensor ids, in call
        order) and ``segments`` in run order, each naming its kernel's
        manifest and the tensors bound to that kernel's inputs and outputs.
        Returns the sequence's path."""
        if not name.isidentifier():
            raise ValueError(f"export: name must be an identifier, got {name!r}")
        used = {t.id: t for s in self.segments for t in (*s.inputs, *s.outputs)}
        used.update((t.id, t) for t in (*self.fusion.inputs, *self.outputs))
        sequence = {
            "format": "tilefuse.sequence",
            "version": 1,
            "fusion": self.fusion.fingerprint,
            "tensors": [
                {"id": i, "dtype": t.dtype, "shape": list(t.shape)} for i, t in sorted(used.items())
            ],
            "inputs": [t.id for t in self.fusion.inputs],
            "outputs": [t.id for t in self.outputs],
            "segments": [
                {
                    "kernel": kernel.export(directory, f"{name}_{i}").name,
                    "scheduler": segment.scheduler,
                    "inputs": [t.id for t in segment.inputs],
                    "outputs": [t.id for t in segment.outputs],
                }
                for i, (segment, kernel) in enumerate(zip(self.segments, self.kernels, strict=True))
            ],
        }
        path = Path(directory) / f"{name}.json"
        path.write_text(json.dumps(sequence, indent=2) + "\n")
        return path

    def benchmark(self, *arrays: Any, warmup: int = 3, repeat: int = 20) -> Any:
        """Host time of the whole sequence (arrays cross the host between
        segments), as a :class:`Timing`."""
        from .schedule import Timing
        from .timing import call_sampler

        samples = call_sampler(lambda: self(*arrays))(warmup, repeat)
        return Timing(statistics.median(samples), min(samples), max(samples), samples)

    def __repr__(self) -> str:
        parts = ", ".join(s.scheduler for s in self.segments)
        return f"<SegmentedKernel {len(self.kernels)} kernels: {parts}>"
