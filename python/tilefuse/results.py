"""What a tuning run gives back: its :class:`TuneResult` and, in it, a
:class:`Trial` record per candidate measured."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .params import HeuristicParams

__all__ = ["Trial", "TrialOrigin", "TrialStatus", "TuneResult"]

#: Where a candidate came from: the default heuristic, a cached winner of
#: the same structure at other sizes (``warm_start``), a seed heuristic's
#: config or its neighbour, or the search (``random``, ``neighbor`` of the
#: pattern descent, ``surrogate``'s forest, ``exhaustive``).
TrialOrigin: TypeAlias = Literal[
    "default",
    "warm_start",
    "seed",
    "heuristic_neighbor",
    "random",
    "neighbor",
    "surrogate",
    "exhaustive",
]
#: ``ok``: checked and timed; ``failed``: refused by the scheduler or failed
#: to build or run; ``wrong``: outputs differ from the reference;
#: ``duplicate``: the same kernel as an earlier candidate (its time);
#: ``cut``: much slower than the best in a short timing.
TrialStatus: TypeAlias = Literal["ok", "failed", "wrong", "duplicate", "cut"]


@dataclass(frozen=True)
class Trial:
    """One candidate a tuning run measured."""

    #: In the order candidates were proposed.
    id: int
    #: The candidate's params, as a dict (``HeuristicParams.from_dict``).
    params: dict[str, Any]
    origin: TrialOrigin
    status: TrialStatus
    #: Median seconds. On the CPU device and lavapipe, which share the
    #: host's cores, scaled by the default's kernel timed right after it:
    #: the time it would have taken at the speed the default's trial ran at.
    time: float | None
    #: Seconds since tuning started.
    at: float
    #: The seed heuristic of a seed or its neighbour.
    heuristic: str | None = None
    #: Why it failed or was wrong.
    error: str | None = None
    #: The fingerprint of the device that measured it.
    device: str | None = None
    #: Its time in the second look before the final run, for the dozen
    #: fastest but the default.
    look: float | None = None
    #: Kernel launches its check and timing made (those of the default's
    #: kernel its time was paired with included); 0 where nothing ran.
    launches: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trial:
        """A trial from the tuner's record (unknown keys, such as the
        point in the space, are left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` found. Times are medians in seconds, from the final
    run of the best candidates and the default heuristic's, timed in
    interleaved rounds (five, up to twenty for short kernels): a candidate
    wins only if it beat the default by at least 1 % in as many rounds as
    a sign test asks (all of five; a gain of 10 % on the median may lose
    one of five), and again in a confirmation of the two alone, else the
    default's params are the best. The best four candidates are the
    fastest of the dozen fastest trials in a second look (two interleaved
    rounds, each keeping the faster): the fastest of a hundred trials are
    the luckiest, and a slow spell of a shared machine only adds time."""

    #: The winner: one params object, or one per segment.
    best_params: HeuristicParams | list[HeuristicParams]
    best_time: float
    default_time: float | None
    #: Every candidate, in the order measured.
    trials: list[Trial] = field(repr=False)
    #: The seed heuristics that applied: ``name``, ``seeds`` (params
    #: dicts), ``won`` (whether one of its seeds won).
    heuristics: list[dict[str, Any]] = field(default_factory=list, repr=False)
    scheduler: str | list[str] = ""
    strategy: str = ""
    elapsed: float = 0.0
    #: The default heuristic's params the search started from (one, or one
    #: per segment).
    default_params: HeuristicParams | list[HeuristicParams] | None = field(default=None, repr=False)
    #: The winner's time in each round of the final run, and of its
    #: confirmation where one bore out a winner other than the default:
    #: what ``best_time`` is the median of (for a segmented fusion, its
    #: segments' times added round by round, over the rounds all have).
    best_samples: list[float] = field(default_factory=list, repr=False)

    @property
    def changes(self) -> dict[str, tuple[Any, Any]] | list[dict[str, tuple[Any, Any]]]:
        """What the winner changed from the default heuristic's params, by
        field path: ``{"unroll_factor_iteration": (1, 4), ...}`` (one such
        dict per segment for a segmented fusion; empty where the default
        won)."""
        pairs = zip(_listed(self.default_params), _listed(self.best_params), strict=True)
        changes = [default.diff(best) for default, best in pairs]
        return changes if isinstance(self.best_params, list) else changes[0]

    @property
    def warm_start(self) -> list[Trial]:
        """The trials of the cached winners of this structure at other sizes
        on this device that tuning started from."""
        return [t for t in self.trials if t.origin == "warm_start"]

    @property
    def warm_start_won(self) -> bool:
        """Whether the winner (of a segment) is a warm start's params."""
        best = self.best_params if isinstance(self.best_params, list) else [self.best_params]
        return any(t.params == p.to_dict() for t in self.warm_start for p in best)

    @property
    def speedup(self) -> float | None:
        """The default heuristic's time over the winner's."""
        return None if self.default_time is None else self.default_time / self.best_time

    def to_json(self, *, indent: int | None = None) -> str:
        """The result, its trials included, as JSON: one line, or indented
        by ``indent`` spaces, as :func:`json.dumps` takes it."""
        best = self.best_params
        return json.dumps(
            {
                "best_params": [p.to_dict() for p in best]
                if isinstance(best, list)
                else best.to_dict(),
                "changes": self.changes,
                "best_time": self.best_time,
                "best_samples": self.best_samples,
                "default_time": self.default_time,
                "speedup": self.speedup,
                "scheduler": self.scheduler,
                "strategy": self.strategy,
                "elapsed": self.elapsed,
                "heuristics": self.heuristics,
                "trials": [t.to_dict() for t in self.trials],
            },
            indent=indent,
        )

    def plot(self, path: str) -> None:
        """Best time so far against trials and against seconds (needs
        matplotlib: ``pip install tilefuse[plot]``)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        best, xs, ts = float("inf"), [], []
        for t in self.trials:
            if t.status == "ok" and t.time is not None:
                best = min(best, t.time)
            if best < float("inf"):
                xs.append(t.at)
                ts.append(best * 1e3)
        fig, (by_trial, by_time) = plt.subplots(1, 2, figsize=(10, 4))
        by_trial.plot(range(1, len(ts) + 1), ts, marker=".")
        by_trial.set_xlabel("trial")
        by_time.plot(xs, ts, marker=".")
        by_time.set_xlabel("seconds")
        for ax in (by_trial, by_time):
            ax.set_ylabel("best ms so far")
            ax.grid(alpha=0.3)
        fig.suptitle(f"tilefuse tune: {self.scheduler}, {self.strategy}")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def _listed(params: HeuristicParams | list[HeuristicParams] | None) -> list[HeuristicParams]:
    return params if isinstance(params, list) else [] if params is None else [params]
