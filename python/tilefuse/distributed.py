"""Tuning on a Ray cluster (``pip install tilefuse[ray]``).

A :class:`RayExecutor` starts one Ray actor per :class:`Worker`; each owns
one device (a GPU through Ray's ``GPU`` resource, or the CPU device with a
set number of threads) and schedules, builds, checks and times the
candidates the driver's search hands out. Results stream back as they
finish; the driver keeps the search and writes the cache, so no shared
filesystem is needed. Workers are grouped by their device's fingerprint
and timings are only compared within a group. A worker that dies has its
candidate measured by another; a candidate that kills two workers is
recorded as failed.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _native
from .device import Device, DeviceFacts

if TYPE_CHECKING:
    import numpy as np

__all__ = ["RayExecutor", "RemoteDevice", "Worker"]

#: Times a candidate is measured again after its worker died.
_RETRIES = 1


@dataclass(frozen=True)
class Worker:
    """One tuning worker: the device it owns and what it needs of Ray."""

    #: ``"cpu"`` or ``"gpu"`` (reserves one of Ray's ``GPU`` resources).
    device: str = "cpu"
    #: Threads of the CPU device (``TILEFUSE_NUM_THREADS``; Ray reserves as
    #: many CPUs); one for a GPU worker.
    threads: int = 1
    #: Further Ray resources the worker needs: a label that picks the
    #: nodes it may run on, e.g. ``{"tuner": 1}`` for nodes started with
    #: ``ray start --resources='{"tuner": 4}'``.
    resources: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "gpu"):
            raise ValueError(f"Worker.device: {self.device!r} is not 'cpu' or 'gpu'")
        if self.threads < 1:
            raise ValueError(f"Worker.threads: {self.threads} is not a positive integer")


class RemoteDevice(DeviceFacts):
    """A worker's device as the driver sees it: its info and fingerprint
    (what seed heuristics and the cache need), not a device to run on."""

    __slots__ = ("_info",)

    def __init__(self, info: dict[str, Any]) -> None:
        self._info = info

    @property
    def info(self) -> dict[str, Any]:
        return self._info

    def __repr__(self) -> str:
        return f"<RemoteDevice {self._info['name']} ({self._info['backend']}, {self.fingerprint})>"


@dataclass(frozen=True)
class Problem:
    """What workers check and time candidates on. Sent to them as one Ray
    object (put once), made into a native problem once per worker."""

    #: The fusion, as JSON.
    fusion: str
    #: Makes the random inputs when there are no ``inputs``.
    seed: int
    inputs: tuple[np.ndarray, ...] | None
    #: The outputs the inputs must give; the reference evaluator's if None.
    expected: tuple[np.ndarray, ...] | None
    #: How close f32 outputs must be (see :class:`~tilefuse.Tolerance`).
    rtol: float
    #: A recording whose times are read instead of measured.
    replay: str | None

    def native(self) -> _native.TuneProblem:
        f = _native.Fusion.from_json(self.fusion)
        return _native.TuneProblem(f, self.seed, self.inputs, self.expected, self.rtol, self.replay)


class _TuneWorker:
    """The Ray actor: owns one device, measures candidates on it."""

    def __init__(self, device: str) -> None:
        self.device = Device.gpu() if device == "gpu" else Device.cpu()
        self.problem: tuple[str, _native.TuneProblem] | None = None

    def describe(self) -> tuple[dict[str, Any], int]:
        return self.device.info, os.getpid()

    def _problem(self, key: str, problem: Problem) -> _native.TuneProblem:
        if self.problem is None or self.problem[0] != key:
            self.problem = (key, problem.native())
        return self.problem[1]

    def measure(self, key: str, problem: Problem, candidate: dict[str, Any]) -> dict[str, Any]:
        m = self._problem(key, problem).measure(self.device._native, candidate)
        m["device"] = self.device.fingerprint
        return m

    def final_round(
        self,
        key: str,
        problem: Problem,
        finalists: list[dict[str, Any]],
        warmup: int,
        repeat: int,
        rounds: int,
    ) -> list[list[float]]:
        tp = self._problem(key, problem)
        return tp.final_round(self.device._native, finalists, warmup, repeat, rounds)


class Stopped(Exception):
    """Raised in a device group's tuning when another's failed or Ctrl-C
    stopped the run."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError("the Ray executor needs Ray: pip install 'tilefuse[ray]'") from e
    return ray


class RayExecutor:
    """Measures tuning candidates on Ray workers. ``address`` is the
    cluster's (``"HOST:PORT"``, ``"auto"``); without it an already
    initialized Ray is used, else a local one is started. ``workers`` is
    a count of CPU workers with ``threads`` threads each, or a list of
    :class:`Worker`; by default one GPU worker per GPU of the cluster, or,
    without GPUs, one CPU worker per node with all its CPUs. Used as a
    context manager, it stops its workers on leaving."""

    def __init__(
        self,
        workers: int | Sequence[Worker] | None = None,
        address: str | None = None,
        threads: int = 1,
    ) -> None:
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False)
        specs = _specs(ray, workers, threads)
        actor = ray.remote(_TuneWorker)
        self.actors = [_start(ray, actor, w) for w in specs]
        described = ray.get([a.describe.remote() for a in self.actors])
        self.devices = [RemoteDevice(info) for info, _ in described]
        #: The workers' process ids, in order (tests kill one).
        self.pids = [pid for _, pid in described]

    def groups(self) -> dict[str, tuple[RemoteDevice, list[Any]]]:
        """The workers by device fingerprint: the device and its actors."""
        out: dict[str, tuple[RemoteDevice, list[Any]]] = {}
        for d, a in zip(self.devices, self.actors, strict=True):
            out.setdefault(d.fingerprint, (d, []))[1].append(a)
        return out

    def shutdown(self) -> None:
        """Stops the workers."""
        ray = _ray()
        for a in self.actors:
            ray.kill(a)

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _specs(ray: Any, workers: int | Sequence[Worker] | None, threads: int) -> list[Worker]:
    if isinstance(workers, int):
        if workers < 1:
            raise ValueError(f"RayExecutor: workers={workers} is not a positive integer")
        return [Worker("cpu", threads)] * workers
    if workers is not None:
        return list(workers)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus:
        return [Worker("gpu")] * gpus
    nodes = [n for n in ray.nodes() if n["Alive"]]
    return [Worker("cpu", int(n["Resources"].get("CPU", 1))) for n in nodes]


def _start(ray: Any, actor: Any, w: Worker) -> Any:
    env = {"TILEFUSE_NUM_THREADS": str(w.threads)}
    return actor.options(
        num_cpus=w.threads if w.device == "cpu" else 1,
        num_gpus=1 if w.device == "gpu" else 0,
        resources=dict(w.resources),
        runtime_env={"env_vars": env},
        max_restarts=0,
    ).remote(w.device)


class RayGroup:
    """The native tuner's executor over the workers of one device
    fingerprint: one candidate in flight per worker."""

    def __init__(
        self, actors: list[Any], problem: Problem, stop: threading.Event | None = None
    ) -> None:
        self.ray = _ray()
        #: Set when the run stops (tuning for several devices at once).
        self.stop = stop
        self.live = list(actors)
        self.workers = len(actors)
        self.idle = list(actors)
        self.problem = (uuid.uuid4().hex, self.ray.put(problem))
        self.queue: deque[dict[str, Any]] = deque()
        self.running: dict[Any, tuple[Any, dict[str, Any]]] = {}
        self.deaths: dict[int, int] = {}
        #: Candidates measured again because their worker died.
        self.requeued = 0

    def capacity(self) -> int:
        return len(self.live)

    def losses(self) -> str | None:
        """What worker deaths cost this group, to warn about; None if none."""
        dead = self.workers - len(self.live)
        if not dead:
            return None
        return (
            f"{dead} of {self.workers} Ray workers died while tuning; {self.requeued} "
            "candidates they held were measured on the others"
        )

    def submit(self, candidate: dict[str, Any]) -> None:
        self.queue.append(candidate)
        self._dispatch()

    def _dispatch(self) -> None:
        while self.queue and self.idle:
            a, c = self.idle.pop(), self.queue.popleft()
            self.running[a.measure.remote(*self.problem, c)] = (a, c)

    def next(self) -> tuple[int, dict[str, Any]]:
        died = self.ray.exceptions.RayActorError
        while True:
            if not self.running:
                raise RuntimeError("every Ray worker of this device died; tuning cannot go on")
            if self.stop is not None and self.stop.is_set():
                raise Stopped("stopped with the other devices' tuning")
            # A timeout, so that Ctrl-C reaches the driver between waits.
            ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=0.5)
            if not ready:
                continue
            a, c = self.running.pop(ready[0])
            try:
                m = self.ray.get(ready[0])
            except died:
                if (lost := self._lost(a, c)) is not None:
                    return lost
                continue
            self.idle.append(a)
            self._dispatch()
            return c["id"], m

    def _lost(self, actor: Any, c: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """Drops a dead worker; its candidate goes to another, or fails
        once it killed more than ``_RETRIES`` + 1 workers."""
        self.live.remove(actor)
        self.deaths[c["id"]] = self.deaths.get(c["id"], 0) + 1
        if self.deaths[c["id"]] > _RETRIES:
            self._dispatch()
            error = f"its worker died {self.deaths[c['id']]} times measuring it"
            return c["id"], {"status": "failed", "time": None, "error": error}
        self.requeued += 1
        self.queue.appendleft(c)
        self._dispatch()
        return None

    def final_round(
        self, finalists: list[dict[str, Any]], warmup: int, repeat: int, rounds: int
    ) -> list[list[float]]:
        died = self.ray.exceptions.RayActorError
        for a in list(self.live):
            try:
                times: list[list[float]] = self.ray.get(
                    a.final_round.remote(*self.problem, finalists, warmup, repeat, rounds)
                )
                return times
            except died:
                self.live.remove(a)
        raise RuntimeError("every Ray worker of this device died before the final round")
