"""Tuning data for a fusion family: :func:`collect` tunes a workload at
every shape of a grid into the heuristic cache, where each shape's winner
(or the default heuristic's params, where tuning found nothing beyond
noise) is kept under that shape's key, for a heuristic to be learned from.

    tilefuse.collect("softmax", {"rows": "128..16384", "cols": "64..8192"}, "cpu")

Resumable: a shape whose entry the cache already has is not tuned again
(unless ``redo``), and an interrupted shape's tuning run resumes from its
journal.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

from rich.console import Console

from . import cache as _cache
from .device import as_device
from .tune import Effort, tune
from .workload import Size, Workload, get

if TYPE_CHECKING:
    from .device import Device, DeviceName
    from .distributed import RayExecutor

__all__ = ["Collected", "Outcome", "collect", "grid"]

#: What collecting a shape did: ``tuned`` (a winner beat the default),
#: ``default`` (nothing beat it beyond noise: its params are recorded as
#: the best), ``cached`` (the cache had the shape's entry already).
Outcome: TypeAlias = Literal["tuned", "default", "cached"]

#: A size axis: a list of values, one value, or ``"LO..HI"`` (the powers
#: of two from LO to HI, both included).
SizeSpec: TypeAlias = "str | Size | Sequence[Size]"


@dataclass(frozen=True)
class Collected:
    """One shape of a collection."""

    sizes: dict[str, Size]
    outcome: Outcome
    #: The default heuristic's time over the winner's (``None`` where cached).
    speedup: float | None
    trials: int
    seconds: float


def grid(sizes: Mapping[str, SizeSpec]) -> list[dict[str, Size]]:
    """Every combination of the size axes, the last axis varying fastest.
    ``{"rows": "128..1024", "cols": [64, 100]}`` gives rows 128, 256, 512,
    1024, each with cols 64 and 100."""
    axes = {name: _values(name, spec) for name, spec in sizes.items()}
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def _values(name: str, spec: SizeSpec) -> list[Size]:
    if isinstance(spec, str) and ".." in spec:
        lo, _, hi = spec.partition("..")
        if not (lo.isdigit() and hi.isdigit()) or not 0 < int(lo) <= int(hi):
            raise ValueError(f"sizes: {name}: expected LO..HI with 0 < LO <= HI, got {spec!r}")
        out: list[Size] = []
        n = int(lo)
        while n <= int(hi):
            out.append(n)
            n *= 2
        return out
    if isinstance(spec, str) and "," in spec:
        return [_value(name, v) for v in spec.split(",")]
    if isinstance(spec, str):
        return [_value(name, spec)]
    if isinstance(spec, int | bool):
        return [spec]
    values = list(spec)
    if not values:
        raise ValueError(f"sizes: {name}: no values")
    return values


def _value(name: str, text: str) -> Size:
    text = text.strip()
    if text.isdigit():
        return int(text)
    if not text:
        raise ValueError(f"sizes: {name}: an empty value")
    return text


def collect(
    family: str,
    sizes: Mapping[str, SizeSpec],
    device: Device | DeviceName | None = None,
    *,
    effort: Effort = "quick",
    trials: int | None = None,
    seconds: float | None = None,
    seed: int | None = None,
    executor: Literal["local", "ray"] | RayExecutor = "local",
    redo: bool = False,
    progress: bool = True,
) -> list[Collected]:
    """Tunes the registered workload ``family`` (``tilefuse.workloads``) at
    every shape of :func:`grid` ``(sizes)`` on ``device`` (or on the Ray
    ``executor``'s workers, a shape counting as cached by ``device``'s
    entry), into the heuristic cache, one
    :class:`Collected` per shape in grid order. A shape the cache has an
    entry for already is ``cached`` and not tuned again unless ``redo``.
    ``effort``, ``trials``, ``seconds`` and ``seed`` are each shape's tuning
    run's (see :func:`~tilefuse.tune`)."""
    shapes = grid(sizes)
    out = Console(stderr=True)
    done = []
    for i, shape in enumerate(shapes):
        w = get(family, **shape)
        start = time.perf_counter()
        if not redo and _cached(w, device):
            done.append(Collected(shape, "cached", None, 0, 0.0))
        else:
            r = tune(
                w,
                device,
                effort=effort,
                trials=trials,
                seconds=seconds,
                seed=seed,
                executor=executor,
                progress=False,
            )
            changed = any(r.changes) if isinstance(r.changes, list) else bool(r.changes)
            outcome: Outcome = "tuned" if changed else "default"
            done.append(Collected(shape, outcome, r.speedup, len(r.trials), r.elapsed))
        if progress:
            c = done[-1]
            speedup = "" if c.speedup is None else f", {c.speedup:.2f}x"
            took = time.perf_counter() - start
            out.print(f"[{i + 1}/{len(shapes)}] {w.label}: {c.outcome}{speedup} ({took:.1f} s)")
    return done


def _cached(w: Workload, device: Device | DeviceName | None) -> bool:
    """Whether every kernel of ``w``'s fusion has a cache entry on
    ``device`` (a bundle's does not count: collecting measures here)."""
    f, dev = w.payload, as_device(device)
    parts = [(s.fusion, s.scheduler) for s in f.segments()] if f._segmented() else [(f, None)]
    return all(
        (entry := _cache.lookup(part, dev, scheduler)) is not None and entry["layer"] == "cache"
        for part, scheduler in parts
    )
