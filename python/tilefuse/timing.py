"""Timing as Triton's ``do_bench`` does it: a few launches estimate one
launch's time, which sets how many launches fill a warm-up and a
measurement budget given in seconds (GPU clocks ramp up with load; a fixed
count is too few for fast kernels and too many for slow ones). Competing
variants are timed interleaved, in chunks whose order rotates each round
(Helion), so a drifting machine slows them alike. On the CPU device an
optional flush writes a buffer larger than the last-level cache before each
sample, outside the timed region.

A *sampler* is ``run(warmup, repeat) -> [seconds, ...]``: the kernel's own
timer (``Kernel.benchmark``: GPU timestamps where the adapter has them) or
the host clock around the call a user makes (:func:`call_sampler`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Budget", "CacheFlush", "Sampler", "call_sampler", "interleave", "measure"]

Sampler = Callable[[int, int], list[float]]


@dataclass(frozen=True)
class Budget:
    """Seconds of warm-up and of measurement, and bounds on the count of
    timed launches."""

    warmup: float = 0.1
    rep: float = 0.5
    min_repeat: int = 5
    max_repeat: int = 10_000

    def __post_init__(self) -> None:
        if not (self.warmup >= 0 and self.rep >= 0):
            raise ValueError(f"timing: warmup and rep must be >= 0 s, got {self}")
        if not 1 <= self.min_repeat <= self.max_repeat:
            raise ValueError(f"timing: need 1 <= min_repeat <= max_repeat, got {self}")

    def counts(self, estimate: float) -> tuple[int, int]:
        """Warm-up and timed launches for launches of ``estimate`` seconds."""
        per = max(estimate, 1e-7)
        repeat = min(max(_launches(self.rep, per), self.min_repeat), self.max_repeat)
        return _launches(self.warmup, per), repeat


def _launches(seconds: float, per: float) -> int:
    """Launches of ``per`` seconds that fill ``seconds`` (rounded first, so
    float noise does not add one)."""
    return math.ceil(round(seconds / per, 6))


class CacheFlush:
    """Evicts the CPU caches by writing a buffer twice the size of the
    last-level cache (64 MiB when the size is unknown)."""

    def __init__(self, nbytes: int | None = None) -> None:
        self._buffer = np.zeros(nbytes or 2 * (_last_level_cache() or 32 << 20), np.uint8)

    def __call__(self) -> None:
        self._buffer += 1


def _last_level_cache() -> int | None:
    """Bytes of the largest cache Linux reports for cpu0."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KM")) * scale)
    return max(sizes, default=None)


def call_sampler(fn: Callable[[], Any]) -> Sampler:
    """Host time of ``fn()`` per launch: what a user calling it waits."""

    def run(warmup: int, repeat: int) -> list[float]:
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return samples

    return run


def _counts(run: Sampler, budget: Budget) -> tuple[int, int]:
    """Warm-up and timed launches of ``run`` under ``budget``, estimated
    from a few launches. Their warm-up is the only one ``run`` is asked
    for: a kernel's own timer warms a GPU for at least 200 ms whenever
    asked, so the budget's warm-up launches follow as untimed samples.
    A launch costs at least its host time: GPU timestamps leave out the
    submission and the read-back (on an H100 a launch of a 0.07 ms kernel
    took 2 ms, and budgets counted in timestamps ran for minutes)."""
    reported = statistics.median(run(1, 3))
    start = time.perf_counter()
    run(0, 3)
    return budget.counts(max(reported, (time.perf_counter() - start) / 3))


def _warm(run: Sampler, launches: int) -> None:
    if launches:
        run(0, launches)


def _timed(run: Sampler, repeat: int, flush: Callable[[], None] | None) -> list[float]:
    if flush is None:
        return run(0, repeat)
    samples = []
    for _ in range(repeat):
        flush()
        samples += run(0, 1)
    return samples


def measure(run: Sampler, budget: Budget, flush: Callable[[], None] | None = None) -> list[float]:
    """Every timed sample of ``run`` under ``budget``, ``flush()`` before
    each when given."""
    warmup, repeat = _counts(run, budget)
    _warm(run, warmup)
    return _timed(run, repeat, flush)


def interleave(
    runs: Mapping[str, Sampler],
    budget: Budget,
    rounds: int = 5,
    flush: Callable[[], None] | None = None,
    settle: float = 0.0,
) -> dict[str, list[float]]:
    """Samples of each variant, timed in ``rounds`` chunks per variant whose
    order rotates each round; each variant gets ``budget`` in all.
    ``settle``: seconds of sleep before each chunk, for variants from other
    libraries whose worker threads spin on after a call (OpenBLAS's spin
    about 0.1 s and slowed a matmul timed right after numpy's by up to
    2x on a 2-core machine)."""
    if rounds < 1:
        raise ValueError(f"timing: rounds must be >= 1, got {rounds}")
    chunks = {}
    for name, run in runs.items():
        warmup, repeat = _counts(run, budget)
        _warm(run, warmup)
        chunks[name] = math.ceil(repeat / rounds)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            time.sleep(settle)
            samples[name] += _timed(runs[name], chunks[name], flush)
    return samples
