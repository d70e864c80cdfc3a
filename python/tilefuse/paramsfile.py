"""Params files: what a selector or the tuner picked for one fusion on one
device, as JSON a person can read, edit and pass to a pipeline's
``select: {file: ...}`` stage.

    {
      "format": "tilefuse-params", "version": 1,
      "fusion": "<Fusion.fingerprint>",
      "device": {"fingerprint": "<Device.fingerprint>", "name": "...", "backend": "..."},
      "source": "tune quick",
      "segments": [{"scheduler": "reduction", "params": {...}}]
    }

The fingerprints say what the params were picked for: :func:`load` on
another fusion or device warns and returns ``None`` so the caller falls
back to its selector (params tuned for one device are legal elsewhere but
not what a selector would pick there). Files are written atomically: a
crash mid-write leaves the old file whole.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._native import ParamsError
from .params import HeuristicParams

if TYPE_CHECKING:
    from .device import Device, DeviceName
    from .fusion import Fusion

__all__ = ["FORMAT", "load", "save"]

FORMAT = "tilefuse-params"
VERSION = 1

ParamsList = Sequence[HeuristicParams | dict[str, Any]]


def save(
    path: str | os.PathLike[str],
    fusion: Fusion,
    device: Device | DeviceName,
    params: ParamsList,
    source: str = "",
) -> Path:
    """Writes ``params`` (one per segment, or one for a fusion one
    scheduler takes whole) tagged with the fusion's and device's
    fingerprints."""
    from .device import as_device

    device = as_device(device)
    target = Path(path)
    dicts = [p.to_dict() if isinstance(p, HeuristicParams) else dict(p) for p in params]
    document = {
        "format": FORMAT,
        "version": VERSION,
        "fusion": fusion.fingerprint,
        "device": {
            "fingerprint": device.fingerprint,
            "name": device.info["name"],
            "backend": device.info["backend"],
        },
        "source": source,
        "segments": [{"scheduler": d.get("scheduler"), "params": d} for d in dicts],
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load(
    path: str | os.PathLike[str], fusion: Fusion, device: Device | DeviceName
) -> list[dict[str, Any]] | None:
    """The params of ``path``, one dict per segment; ``None`` with a
    ``RuntimeWarning`` naming what differs when the file was written for
    another fusion or device. A file that is not a params file raises
    ``ParamsError`` naming the file and the field."""
    from .device import as_device

    device = as_device(device)
    source = Path(path)
    try:
        document = json.loads(source.read_text())
    except json.JSONDecodeError as e:
        raise ParamsError(f"{source}: not JSON ({e})") from e
    _check_shape(source, document)
    mismatches = []
    if document["fusion"] != fusion.fingerprint:
        mismatches.append(
            f"fusion {document['fusion'][:12]} (this fusion is {fusion.fingerprint[:12]})"
        )
    if document["device"].get("fingerprint") != device.fingerprint:
        mismatches.append(
            f"device {document['device'].get('name')!r} "
            f"(this is {device.info['name']!r}, or the same with other limits or threads)"
        )
    if mismatches:
        warnings.warn(
            f"{source}: params picked for another {' and '.join(mismatches)}; not used",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return [dict(s["params"]) for s in document["segments"]]


def _check_shape(source: Path, document: Any) -> None:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ParamsError(f"{source}: format: not a params file (expected {FORMAT!r})")
    if document.get("version") != VERSION:
        raise ParamsError(f"{source}: version: {document.get('version')!r}, expected {VERSION}")
    if not isinstance(document.get("fusion"), str):
        raise ParamsError(f"{source}: fusion: expected the fusion's fingerprint (a string)")
    if not isinstance(document.get("device"), dict):
        raise ParamsError(f"{source}: device: expected a mapping with its fingerprint")
    segments = document.get("segments")
    if not isinstance(segments, list) or not segments:
        raise ParamsError(f"{source}: segments: expected a non-empty list")
    for i, s in enumerate(segments):
        if not isinstance(s, dict) or not isinstance(s.get("params"), dict):
            raise ParamsError(f"{source}: segments[{i}].params: expected a params mapping")
