"""The heuristic cache: tuned winners kept per fusion structure, scheduler
and device, consulted by :meth:`Fusion.heuristics` before the default
heuristic. One JSON file per entry in :func:`directory` (``TILEFUSE_CACHE``
or the user's cache directory), written atomically; the faster of two
measurements of one key stays; a corrupt file is set aside with a warning.

Bundles are whole caches in one JSON file (:func:`export`, :func:`merge`),
to ship with a package or share between machines. A registered bundle
(:func:`register_bundle`, or listed in ``TILEFUSE_BUNDLES``, separated by
``os.pathsep``) is a read-only layer under the user's cache: lookups try the
cache, then each bundle in order, then fall back to the default heuristic.
:func:`import_bundle` copies a bundle's entries into the cache, marked
``imported``: served, but a winner measured here always replaces them.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _native

if TYPE_CHECKING:
    from .device import Device, DeviceFacts, DeviceName
    from .fusion import Fusion

__all__ = [
    "bundle_entries",
    "bundles",
    "clear",
    "describe",
    "directory",
    "entries",
    "explain",
    "export",
    "import_bundle",
    "learned",
    "lookup",
    "merge",
    "prune",
    "register_bundle",
    "source",
    "store",
    "unregister_bundle",
    "warm_start",
]

_registered: list[str] = []


def _warn(messages: list[str]) -> None:
    for m in messages:
        warnings.warn(m, RuntimeWarning, stacklevel=3)


def directory() -> str | None:
    """The cache directory in use."""
    return _native.cache_dir()


def bundles() -> list[str]:
    """The bundles lookups fall through to, in order: those registered, then
    those in ``TILEFUSE_BUNDLES``."""
    listed = [p for p in os.environ.get("TILEFUSE_BUNDLES", "").split(os.pathsep) if p]
    return [*_registered, *listed]


def register_bundle(path: str | os.PathLike[str]) -> None:
    """Adds a read-only bundle layer (a package registers the bundle it
    ships); it must load now, so a wrong path fails here."""
    path = str(Path(path).resolve())
    bundle_entries(path)
    if path not in _registered:
        _registered.append(path)


def unregister_bundle(path: str | os.PathLike[str]) -> None:
    """Removes a registered bundle layer."""
    resolved = str(Path(path).resolve())
    if resolved in _registered:
        _registered.remove(resolved)


def lookup(fusion: Fusion, device: Device, scheduler: str | None = None) -> dict[str, Any] | None:
    """The entry for ``fusion`` on ``device`` from the cache or a bundle:
    its ``"params"``, ``"best_time"`` and ``"samples"`` (the winner's time
    in each round of the tuner's final run and of its confirmation),
    ``"default_time"``, ``"trials"``, ``"strategy"``, ``"heuristics"``,
    ``"signature"`` (what the fusion is), ``"space"`` (a digest of the
    fields and values tuned over), ``"origin"``, ``"created"``, ``"key"``,
    and ``"layer"``: ``"cache"`` or the bundle's path. ``None`` when neither
    has one."""
    entry, layer, messages = _native.cache_get(
        fusion._native, device._native, scheduler, None, bundles()
    )
    _warn(messages)
    if entry is not None:
        entry["layer"] = layer
    return entry


def store(
    fusion: Fusion,
    device: DeviceFacts,
    params: dict[str, Any],
    best_time: float,
    default_time: float | None = None,
    trials: int = 0,
    strategy: str = "",
    heuristics: list[str] | None = None,
    samples: list[float] | None = None,
    space: str = "",
) -> bool:
    """Stores a winner for ``device`` (a :class:`Device`, or a remote
    worker's), with its ``samples`` (its time in each round of a final
    run) and the digest of the ``space`` it was tuned over; ``False`` when
    a faster entry of its key was there."""
    stored, messages = _native.cache_put(
        fusion._native,
        device.info,
        params,
        best_time,
        default_time,
        trials,
        strategy,
        heuristics or [],
        samples or [],
        space,
    )
    _warn(messages)
    return stored


def warm_start(fusion: Fusion, device: DeviceFacts, scheduler: str) -> list[dict[str, Any]]:
    """The params of the winners tuned for ``fusion``'s family (its
    structure at any sizes) with ``scheduler`` on ``device``, from the cache
    and the bundles, nearest sizes first: where :func:`tilefuse.tune`
    starts its search after the default heuristic."""
    found, messages = _native.cache_warm_start(
        fusion._native, device.info, scheduler, None, bundles()
    )
    _warn(messages)
    return found


def entries() -> list[dict[str, Any]]:
    """Every entry of the cache."""
    found, messages = _native.cache_entries()
    _warn(messages)
    return found


def bundle_entries(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every entry of the bundle file ``path``."""
    return _native.bundle_entries(os.fspath(path))


def export(path: str | os.PathLike[str]) -> int:
    """Writes every entry and learned heuristic of the cache to the bundle
    file ``path``; how many."""
    n, messages = _native.bundle_export(os.fspath(path))
    _warn(messages)
    return n


def merge(output: str | os.PathLike[str], *inputs: str | os.PathLike[str]) -> int:
    """Merges bundle files into ``output``, keeping the faster entry of
    each key (an entry measured where it was exported beats an imported
    one) and the first learned heuristic of each name; how many entries
    and learned heuristics ``output`` has."""
    return _native.bundle_merge(os.fspath(output), [os.fspath(p) for p in inputs])


def import_bundle(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Copies a bundle's entries into the cache, marked ``imported``, and
    its learned heuristics into ``learned/``: ``(stored, in the bundle)``
    (entries measured here, or faster ones, stay; so do learned
    heuristics of the same name)."""
    stored, total, messages = _native.bundle_import(os.fspath(path))
    _warn(messages)
    return stored, total


def prune() -> int:
    """Removes the entries no lookup can serve any more (tuned by a tilefuse
    with an older params format or scheduler/codegen version: an entry's
    ``"stale"``), corrupt files set aside, and temporary files of writers
    that died; how many entries it removed."""
    return _native.cache_prune()


def clear() -> int:
    """Removes every entry; how many there were."""
    return _native.cache_clear()


def learned(fusion: Fusion, device: Device, scheduler: str | None = None) -> dict[str, Any] | None:
    """What the learned heuristic that serves ``fusion`` on ``device`` (in
    the cache directory's ``learned/`` folder, else in a registered bundle)
    picks: ``{"params": dict or
    None, "path", "leaf", "learned_on"}``, ``params`` ``None`` where its
    leaf keeps the default heuristic, ``learned_on`` the name of the device
    it was learned on where that is another of the same kind (one learned
    here comes first); ``None`` when no learned heuristic serves it."""
    params, path, leaf, learned_on, messages = _native.learned_get(
        fusion._native, device._native, scheduler, None, bundles()
    )
    _warn(messages)
    if path is None:
        return None
    return {"params": params, "path": path, "leaf": leaf, "learned_on": learned_on}


def source(fusion: Fusion, device: Device, scheduler: str | None = None) -> str:
    """Where a lookup for ``fusion`` (one kernel's) on ``device`` takes
    its params from, as :meth:`Fusion.params_source` says it: the cache
    or a bundle, else a learned heuristic (and its leaf), else the default
    heuristic."""
    entry = lookup(fusion, device, scheduler)
    if entry is not None:
        return describe(entry, fusion, device)
    pick = learned(fusion, device, scheduler)
    if pick is None:
        return "default heuristic"
    chose = "its params" if pick["params"] is not None else "the default heuristic"
    on = f", learned on {pick['learned_on']}" if pick["learned_on"] else ""
    return f"learned: {pick['path']} (leaf {pick['leaf']}: {chose}{on})"


def describe(entry: dict[str, Any], fusion: Fusion, device: Device) -> str:
    """``"cache: DIR (N trials, STRATEGY, 1.23x the default)"`` or
    ``"bundle: PATH (...)"``: the layer that served ``entry`` and the tuning
    that made it, and whether it searched another params space than the
    tuner would now for ``fusion`` on ``device``."""
    speedup = (
        f", {entry['default_time'] / entry['best_time']:.2f}x the default"
        if entry.get("default_time")
        else ""
    )
    layer = f"cache: {directory()}" if entry["layer"] == "cache" else f"bundle: {entry['layer']}"
    imported = ", imported" if entry.get("origin") == "imported" else ""
    space = entry.get("space")
    kind = entry["key"]["scheduler"]
    moved = space and space != _native.space_digest(fusion._native, device._native, kind)
    # Tuned over other fields or values (a narrowed tune, or an older
    # scheduler's): still served, but tuning again searches this space.
    other = ", over another params space than the tuner's now" if moved else ""
    return f"{layer} ({entry['trials']} trials, {entry['strategy']}{speedup}{imported}{other})"


def explain(
    fusion: Fusion, device: Device | DeviceName | None = None, scheduler: str | None = None
) -> str:
    """Why a lookup for ``fusion`` on ``device`` (see :func:`~tilefuse.as_device`)
    hits or misses: the nearest entries and the key fields in which they
    differ."""
    from .device import as_device

    device = as_device(device)
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
