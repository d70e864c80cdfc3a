"""Segmented fusions: parts that one scheduler each accepts, run in order.

``Fusion.segments()`` shows the parts; ``Fusion.heuristics()`` returns one
params object per segment for such a fusion and ``Fusion.schedule()`` takes
them back, returning a :class:`SegmentedKernel`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .fusion import Fusion, Tensor
    from .schedule import Device, Kernel

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
    segments' outputs."""

    __slots__ = ("device", "fusion", "kernels", "outputs", "segments")

    def __init__(
        self, fusion: Fusion, segments: list[Segment], kernels: list[Kernel], device: Device
    ) -> None:
        self.fusion = fusion
        self.segments = segments
        self.kernels = kernels
        self.device = device
        #: The outputs when it was scheduled (outputs added to the fusion
        #: later are not computed by these kernels).
        self.outputs = fusion.outputs

    def __call__(self, *arrays: Any) -> Any:
        if len(arrays) != len(self.fusion.inputs):
            from ._native import DeviceError

            raise DeviceError(
                f"the fusion takes {len(self.fusion.inputs)} inputs, got {len(arrays)}"
            )
        values: dict[int, Any] = {
            t.id: np.asarray(a) for t, a in zip(self.fusion.inputs, arrays, strict=True)
        }
        for segment, kernel in zip(self.segments, self.kernels, strict=True):
            outs = kernel(*(values[t.id] for t in segment.inputs))
            outs = outs if isinstance(outs, tuple) else (outs,)
            values.update((t.id, o) for t, o in zip(segment.outputs, outs, strict=True))
        results = tuple(values[t.id] for t in self.outputs)
        return results[0] if len(results) == 1 else results

    def benchmark(self, *arrays: Any, warmup: int = 3, repeat: int = 20) -> Any:
        """Host time of the whole sequence (arrays cross the host between
        segments), as a :class:`Timing`."""
        from .schedule import Timing

        for _ in range(warmup):
            self(*arrays)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            self(*arrays)
            samples.append(time.perf_counter() - start)
        return Timing(statistics.median(samples), min(samples), max(samples), samples)

    def __repr__(self) -> str:
        parts = ", ".join(s.scheduler for s in self.segments)
        return f"<SegmentedKernel {len(self.kernels)} kernels: {parts}>"
