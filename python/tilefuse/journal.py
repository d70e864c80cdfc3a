"""The trials of a tuning run, one JSON line each as they are measured, so
that a run that dies (a driver killed, a machine lost) resumes without
measuring them again. Journals live in the cache directory under
``runs/``, one per fusion, device, inputs and seed; a run that ends
removes its journal."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _native

if TYPE_CHECKING:
    from .device import DeviceFacts
    from .fusion import Fusion

#: What a recorded trial keeps: enough to settle its candidate again.
_KEPT = ("params", "status", "time", "error", "device")


class Journal:
    """Appends trials to a journal file; reads what an earlier run left."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @classmethod
    def of(cls, fusion: Fusion, device: DeviceFacts, inputs: str, seed: int) -> Journal:
        """The journal of tuning ``fusion`` on ``device`` with ``inputs``
        (a workload's key, or ``"random"``) and ``seed``; none (nothing
        kept) without a cache directory."""
        directory = _native.cache_dir()
        if directory is None:
            return cls(None)
        what = json.dumps([fusion.fingerprint, device.fingerprint, inputs, seed])
        name = hashlib.sha256(what.encode()).hexdigest()[:24]
        return cls(Path(directory) / "runs" / f"{name}.jsonl")

    def recorded(self) -> list[dict[str, Any]]:
        """The trials an interrupted run recorded (a torn last line, from
        a crash mid-write, is skipped)."""
        if self.path is None or not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        if out:
            warnings.warn(
                f"resuming an interrupted tuning run: {len(out)} trials recorded in "
                f"{self.path} are not measured again",
                RuntimeWarning,
                stacklevel=3,
            )
        return out

    def append(self, trial: dict[str, Any]) -> None:
        """Records a trial (duplicates are not: they measure nothing)."""
        if self.path is None or trial["status"] == "duplicate":
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({k: trial[k] for k in _KEPT}) + "\n"
        with self.path.open("a") as f:  # one write per line: appends don't interleave
            f.write(line)

    def finish(self) -> None:
        """Removes the journal of a run that ended."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
