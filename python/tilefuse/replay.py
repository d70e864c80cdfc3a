"""Strategy replay (Kernel Tuner's simulation mode): a params space
measured once, every point (:func:`record`), then search strategies run
against the recording instead of a device (:func:`compare`), in
milliseconds and the same every time. Record a space on the GPU you tune
for, then compare strategies, budgets or tolerances on any machine::

    text = tilefuse.replay.record(f, "gpu", fields=["unroll_factor_inner"])
    for row in tilefuse.replay.compare(text, seeds=100):
        print(row.strategy, row.mean, row.nine_in_ten)

A recording also replays a whole tuning run: ``tilefuse.tune(f, replay=text)``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _native
from .device import Device, DeviceName, as_device
from .fusion import Fusion
from .tune import _Progress

__all__ = ["STRATEGIES", "StrategyReplay", "compare", "record"]

#: The strategies :func:`compare` runs by default (``exhaustive`` only
#: walks the space in order).
STRATEGIES = ("random", "pattern", "surrogate")

#: Seeds replayed per native call: Ctrl-C and progress land between calls.
_CHUNK = 10


@dataclass(frozen=True)
class StrategyReplay:
    """How one strategy did on a recording over its seeds."""

    strategy: str
    #: The points of the recorded space.
    points: int
    #: Per seed, fewest first: the trials it took to get within the
    #: tolerance of the best (``points`` where it never did). A trial is
    #: counted as a tuning run counts it: a point whose kernel was
    #: measured already is free.
    trials: tuple[int, ...]

    @property
    def mean(self) -> float:
        """The mean trials over the seeds."""
        return sum(self.trials) / len(self.trials)

    @property
    def nine_in_ten(self) -> int:
        """The budget that gets nine seeds in ten there: a strategy that
        is quick on average but sometimes lost shows here."""
        return self.trials[-(-len(self.trials) * 9 // 10) - 1]

    @property
    def within_tenth(self) -> int:
        """Seeds that got there within a tenth of the space."""
        return sum(t <= self.points // 10 for t in self.trials)


def record(
    fusion: Fusion,
    device: Device | DeviceName | None = None,
    fields: list[str] | None = None,
    passes: int = 1,
    progress: Callable[[int], Any] | bool | None = None,
    description: str = "",
) -> str:
    """Measures every point of the params space of ``fusion`` on ``device``
    (only the tunable ``fields`` named, when given: spaces grow fast) and
    returns the recording as JSON. With ``passes`` above 1 each point's
    time is the median of that many passes, so that a slow spell of a
    shared machine moves one pass only. ``progress`` shows a status line
    (by default when stderr is a terminal), or is called with the number
    of points measured so far."""
    device = as_device(device)
    if fusion._segmented():
        raise ValueError(
            f"record: the fusion has {len(fusion.segments())} segments; record one "
            "segment's fusion (fusion.segments()[i].fusion)"
        )
    show = sys.stderr.isatty() if progress is None else progress
    with _Progress(show is True) as shown:
        line = shown.line(doing="recording")
        measured = [0]

        def step(trial: dict[str, Any], best: float | None) -> None:
            measured[0] += 1
            line(trial, best)
            if callable(show):
                show(measured[0])

        options = {"fields": fields, "repeat": 3}
        return _native.record(fusion._native, device._native, options, description, passes, step)


def compare(
    recording: str,
    strategies: Sequence[str] = STRATEGIES,
    seeds: int = 10,
    tolerance: float = 0.05,
    progress: Callable[[int, int], Any] | None = None,
) -> list[StrategyReplay]:
    """Each strategy replayed on ``recording`` (what :func:`record`
    returns) with seeds ``0..seeds``: the trials each took to get within
    ``tolerance`` of the recorded best. ``progress(done, total)`` is
    called as seeds finish."""
    if seeds < 1:
        raise ValueError(f"compare: seeds must be at least 1, not {seeds}")
    runs, total = [], seeds * len(strategies)
    for i, strategy in enumerate(strategies):
        trials: list[int] = []
        for first in range(0, seeds, _CHUNK):
            n = min(_CHUNK, seeds - first)
            trials += _native.replay_trials(recording, strategy, tolerance, first, n)
            if progress is not None:
                progress(i * seeds + first + n, total)
        runs.append((strategy, tuple(sorted(trials))))
    # A recording: the native side has read it.
    points = len(json.loads(recording)["times"])
    return [StrategyReplay(strategy, points, trials) for strategy, trials in runs]
