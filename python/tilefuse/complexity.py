"""The work and compulsory memory traffic of a fusion, counted in Rust
(``tilefuse_ir::summarize``) with one rule per op:

- a unary, binary or ``where`` op: one flop per output element,
  transcendental functions included;
- a reduction: one flop per element reduced (``mean`` one more per result);
- a matmul: ``2·m·n·k`` per batch element;
- inputs, constants, casts, broadcasts, permutes and reshapes: none.

Bytes are what an ideal fused kernel must move: each input read once and
each output written once, in numpy's element sizes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Complexity"]


@dataclass(frozen=True)
class Complexity:
    """Flops and bytes of one run of a fusion (``Fusion.complexity()``)."""

    flops: int
    bytes_read: int
    bytes_written: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Complexity:
        return cls(int(data["flops"]), int(data["bytes_read"]), int(data["bytes_written"]))

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def bytes(self) -> int:
        """Bytes read and written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Flops per byte moved (0 when nothing moves)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def gflops(self, seconds: float) -> float:
        """Throughput of a run that took ``seconds``, in GFLOP/s."""
        return self.flops / seconds / 1e9

    def gbps(self, seconds: float) -> float:
        """Bandwidth of a run that took ``seconds``, in GB/s."""
        return self.bytes / seconds / 1e9
