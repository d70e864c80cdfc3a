"""A family's tuned configs timed at every one of its shapes: what
:func:`~tilefuse.learn` learns from and measures its result by. Saved as
JSON, it replays learning and its evaluation without timing anything,
on any machine (the recorded spaces of ``benches/spaces/`` do the same for
searching one shape).

A recording holds, per shape, the median time of the default heuristic's
kernel and of every config some shape of the family was tuned to, all
timed side by side at that shape; which config each shape was tuned to;
and its default params. A config the scheduler refuses at a shape, or
whose results are wrong there, has no time at it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .workload import Size

__all__ = ["DEFAULT", "FamilyTimes"]

#: The label of the default heuristic's kernel in a row of times.
DEFAULT = "default"

_FORMAT = "tilefuse.family_times"
_VERSION = 1


@dataclass(frozen=True)
class FamilyTimes:
    family: str
    #: The device the times were measured on: its name and fingerprint.
    device: str
    fingerprint: str
    shapes: list[dict[str, Size]]
    #: Every shape's default params, in ``shapes``' order.
    defaults: list[dict[str, Any]]
    #: Each config by its label (``"config 0"``, ...).
    configs: dict[str, dict[str, Any]]
    #: The label of each shape's tuned params; ``None`` where the default
    #: heuristic won.
    winners: list[str | None]
    #: Each shape's median seconds per label, :data:`DEFAULT` included.
    times: list[dict[str, float]]

    def save(self, path: str | os.PathLike[str]) -> None:
        document = {"format": _FORMAT, "version": _VERSION, **asdict(self)}
        Path(path).write_text(json.dumps(document, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FamilyTimes:
        """The recording at ``path``; a ``ValueError`` naming the field
        where it is not one."""
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"family times {path}: {e}") from e

        def fail(field: str, why: str) -> ValueError:
            return ValueError(f"family times {path}: {field}: {why}")

        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise fail("format", f"expected {_FORMAT!r}")
        if doc.get("version") != _VERSION:
            raise fail("version", f"expected {_VERSION}, got {doc.get('version')!r}")
        for field, kind in [("family", str), ("device", str), ("fingerprint", str)]:
            if not isinstance(doc.get(field), kind):
                raise fail(field, f"expected a {kind.__name__}")
        n = len(doc.get("shapes") or [])
        for field in ("shapes", "defaults", "winners", "times"):
            if not isinstance(doc.get(field), list) or len(doc[field]) != n or not n:
                raise fail(field, f"expected a non-empty list, one per shape ({n})")
        configs = doc.get("configs")
        if not isinstance(configs, dict):
            raise fail("configs", "expected a mapping of labels to params")
        for i, (winner, row) in enumerate(zip(doc["winners"], doc["times"], strict=True)):
            if winner is not None and winner not in configs:
                raise fail(f"winners[{i}]", f"{winner!r} is not a config")
            if not isinstance(row, dict) or DEFAULT not in row:
                raise fail(f"times[{i}]", f"expected a mapping with {DEFAULT!r}")
            unknown = [label for label in row if label != DEFAULT and label not in configs]
            if unknown:
                raise fail(f"times[{i}]", f"{unknown[0]!r} is not a config")
        fields = {k: doc[k] for k in cls.__dataclass_fields__}
        return cls(**fields)
