"""The heuristic cache: tuned winners kept per fusion structure, scheduler
and device, consulted by :meth:`Fusion.heuristics` before the default
heuristic. One JSON file per entry in :func:`directory` (``TILEFUSE_CACHE``
or the user's cache directory), written atomically; the faster of two
measurements of one key stays; a corrupt file is set aside with a warning.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from . import _native

if TYPE_CHECKING:
    from .fusion import Fusion
    from .schedule import Device

__all__ = ["clear", "directory", "entries", "explain", "lookup", "store"]


def _warn(messages: list[str]) -> None:
    for m in messages:
        warnings.warn(m, RuntimeWarning, stacklevel=3)


def directory() -> str | None:
    """The cache directory in use."""
    return _native.cache_dir()


def lookup(fusion: Fusion, device: Device, scheduler: str | None = None) -> dict[str, Any] | None:
    """The cached entry for ``fusion`` on ``device`` (its ``"params"``,
    ``"best_time"``, ...), or ``None``."""
    entry, messages = _native.cache_get(fusion._native, device._native, scheduler)
    _warn(messages)
    return entry


def store(
    fusion: Fusion,
    device: Device,
    params: dict[str, Any],
    best_time: float,
    default_time: float | None = None,
    trials: int = 0,
    strategy: str = "",
    heuristics: list[str] | None = None,
) -> bool:
    """Stores a winner; ``False`` when a faster entry of its key was there."""
    stored, messages = _native.cache_put(
        fusion._native,
        device._native,
        params,
        best_time,
        default_time,
        trials,
        strategy,
        heuristics or [],
    )
    _warn(messages)
    return stored


def entries() -> list[dict[str, Any]]:
    """Every entry of the cache."""
    found, messages = _native.cache_entries()
    _warn(messages)
    return found


def clear() -> int:
    """Removes every entry; how many there were."""
    return _native.cache_clear()


def explain(fusion: Fusion, device: Device, scheduler: str | None = None) -> str:
    """Why a lookup for ``fusion`` on ``device`` hits or misses: the nearest
    entries and the key fields in which they differ."""
    near = _native.cache_explain(fusion._native, device._native, scheduler)
    if not near:
        return f"the cache ({directory()}) has no entries"
    lines = []
    for entry, differences in near:
        key = entry["key"]
        what = f"{key['scheduler']} on {key['device']['name']}, fusion {key['fusion'][:12]}"
        lines.append(
            f"hit: {what}"
            if not differences
            else f"miss: {what} differs in {', '.join(differences)}"
        )
    return "\n".join(lines)
