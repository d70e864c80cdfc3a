"""The autotuner: search a scheduler's params space for one fusion on one
device, every candidate checked against the reference and timed, the
winner kept in the heuristic cache (see :mod:`tilefuse.cache`)."""

from __future__ import annotations

import json
import sys
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

import numpy as np
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from . import _native
from . import cache as _cache
from . import heuristic as _heuristic
from .journal import Journal
from .params import HeuristicParams
from .results import Trial, TuneResult
from .tensor import NUMPY_DTYPES
from .workload import Tolerance

if TYPE_CHECKING:
    from .device import DeviceFacts, DeviceName
    from .distributed import RayExecutor, RemoteDevice
    from .fusion import Fusion
    from .workload import Workload, WorkloadLike

Arrays = tuple[np.ndarray, ...]

__all__ = ["Effort", "Strategy", "Trial", "TuneResult", "tune"]

#: How long :func:`tune` searches: ``"none"`` (the default heuristic
#: only), ``"quick"`` (48 trials, 30 s) or ``"full"`` (160 trials, 600 s).
Effort: TypeAlias = Literal["none", "quick", "full"]
#: How :func:`tune` proposes candidates.
Strategy: TypeAlias = Literal["random", "pattern", "surrogate", "exhaustive"]


#: Shows a trial and the best time so far.
_Shown = Callable[[dict[str, Any], "float | None"], None]


class _Progress:
    """Live status lines on stderr while tuning (rich), one per device
    tuned: trials, trials/s, the best time so far, failures, elapsed time."""

    def __init__(self, enabled: bool) -> None:
        self.bar: Progress | None = None
        if enabled:
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.bar.start()

    def line(self, label: str = "", doing: str = "tuning") -> _Shown:
        """A status line for one device (``label`` names it beside others'):
        call it with each trial and the best time so far."""
        if self.bar is None:
            return lambda trial, best: None
        bar, task, counts = self.bar, self.bar.add_task(doing), [0, 0]

        def show(trial: dict[str, Any], best: float | None) -> None:
            counts[0] += 1
            counts[1] += trial["status"] in ("failed", "wrong")
            rate = counts[0] / max(trial["at"], 1e-9)
            best_ms = "-" if best is None else f"{best * 1e3:.3f} ms"
            bar.update(
                task,
                description=f"{doing}{label}: {counts[0]} trials ({rate:.1f}/s), best {best_ms}, "
                f"{counts[1]} failed",
            )

        return show

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


@dataclass(frozen=True)
class _Part:
    """A fusion tuned on its own (the whole, or a segment) and what its
    candidates are checked on: inputs and the outputs they must give, or
    ``None`` for random inputs and the reference evaluator's outputs."""

    fusion: Fusion
    inputs: Arrays | None = None
    expected: Arrays | None = None
    #: A segment of a segmented fusion (its winner goes in a list, even
    #: when the fusion has one segment).
    segment: bool = False


def _parts(fusion: Fusion, arrays: Arrays | None, expected: Arrays | None) -> list[_Part]:
    """The fusions to tune (the segments of a segmented fusion, in order)
    with what each is checked on: ``arrays`` (a workload's), the
    reference evaluator's values of earlier segments' outputs, and the
    ``expected`` outputs (a workload's reference's) where a segment
    computes one of the fusion's outputs."""
    if arrays is None:
        return [_Part(f, segment=fusion._segmented()) for f in fusion._parts()]
    if not fusion._segmented():
        return [_Part(fusion, arrays, expected)]
    segments = fusion.segments()
    values = {t.id: a for t, a in zip(fusion.inputs, arrays, strict=True)}
    wanted = {t.id: e for t, e in zip(fusion.outputs, expected or (), strict=False)}
    out = []
    for seg in segments:
        fed = tuple(values[t.id] for t in seg.inputs)
        outs = seg.fusion._native.evaluate(*fed)
        values.update(zip((t.id for t in seg.outputs), outs, strict=True))
        want = tuple(wanted.get(t.id, v) for t, v in zip(seg.outputs, outs, strict=True))
        out.append(_Part(seg.fusion, fed, want, segment=True))
    return out


@overload
def tune(
    fusion: Fusion | WorkloadLike,
    device: DeviceFacts | DeviceName | None = None,
    *,
    effort: Effort = "quick",
    strategy: Strategy | None = None,
    trials: int | None = None,
    seconds: float | None = None,
    seed: int | None = None,
    cache: bool = True,
    progress: bool | None = None,
    builtin_heuristics: bool = True,
    executor: Literal["local", "ray"] | RayExecutor = "local",
    devices: None = None,
    fields: list[str] | None = None,
    replay: str | None = None,
) -> TuneResult: ...


@overload
def tune(
    fusion: Fusion | WorkloadLike,
    device: DeviceFacts | DeviceName | None = None,
    *,
    effort: Effort = "quick",
    strategy: Strategy | None = None,
    trials: int | None = None,
    seconds: float | None = None,
    seed: int | None = None,
    cache: bool = True,
    progress: bool | None = None,
    builtin_heuristics: bool = True,
    executor: Literal["local", "ray"] | RayExecutor = "local",
    devices: Literal["all"],
    fields: list[str] | None = None,
    replay: str | None = None,
) -> dict[str, TuneResult]: ...


def tune(
    fusion: Fusion | WorkloadLike,
    device: DeviceFacts | DeviceName | None = None,
    *,
    effort: Effort = "quick",
    strategy: Strategy | None = None,
    trials: int | None = None,
    seconds: float | None = None,
    seed: int | None = None,
    cache: bool = True,
    progress: bool | None = None,
    builtin_heuristics: bool = True,
    executor: Literal["local", "ray"] | RayExecutor = "local",
    devices: Literal["all"] | None = None,
    fields: list[str] | None = None,
    replay: str | None = None,
) -> TuneResult | dict[str, TuneResult]:
    """Searches the params space of the scheduler that takes ``fusion`` (a
    :class:`Fusion`, whose candidates run on random inputs, or anything
    :func:`~tilefuse.as_workload` takes, whose payload is tuned on the
    workload's ``inputs(seed)``, each segment of a segmented one on the
    reference evaluator's values of what feeds it, and candidates are
    checked against the workload's ``expected(seed)`` within its
    ``tolerance``) (of each segment's, for fusions that run as several
    kernels) on ``device``
    (a :class:`Device` or ``"cpu"`` / ``"gpu"``; the default device when
    omitted), starting from the default
    heuristic and the seeds of the seed heuristics that apply (the built-in
    ones unless ``builtin_heuristics`` is false, and every registered
    :class:`AutotunerHeuristic`). ``effort`` is ``"none"``, ``"quick"`` (48
    trials, 30 s) or ``"full"`` (160 trials, 600 s) unless ``trials`` /
    ``seconds`` bound it; ``seconds`` bounds the whole run, its final
    re-timing of the best few included (the search stops early enough for
    it, by the times measured so far); ``strategy`` is ``"random"``,
    ``"pattern"``, ``"surrogate"`` (a pattern descent from the default,
    each step the neighbour a random forest ranks likeliest good, then the
    forest's likeliest-good points anywhere, learning from failures too)
    or ``"exhaustive"`` (by default exhaustive when the space fits the
    budget, else surrogate); ``seed`` makes a run reproducible. With
    ``cache`` the winner is stored for :meth:`Fusion.heuristics` to find,
    and each trial is journaled as it is measured, so that a run that
    dies resumes where it stopped.
    ``progress`` shows a status line (by default when stderr is a
    terminal).

    ``executor="ray"`` (or a :class:`~tilefuse.distributed.RayExecutor`)
    measures candidates on Ray workers instead of ``device``: their one
    device fingerprint is tuned, or with ``devices="all"`` each of theirs
    at once, giving ``{fingerprint: TuneResult}``.

    ``replay`` (what :func:`tilefuse.replay.record` returns) reads
    candidates' times from a recorded space instead of measuring them
    (Kernel Tuner's simulation mode): strategies and executors compared
    offline, deterministically; it tunes the recorded fields.
    ``fields`` tunes only those tunable fields (paths, as
    :meth:`Fusion.tunables` names them), the others kept at the default's."""
    from .device import as_device
    from .fusion import Fusion
    from .workload import as_workload

    if replay is not None:
        fields = _recorded_fields(replay, fields)
    options: dict[str, Any] = {
        "effort": effort,
        "strategy": strategy,
        "trials": trials,
        # JSON has no infinity: "no time limit" is the largest float.
        "seconds": sys.float_info.max if seconds == float("inf") else seconds,
        "fields": fields,
    }
    if isinstance(fusion, Fusion):
        parts, inputs = _parts(fusion, None, None), "random"
    else:
        workload = as_workload(fusion)
        parts, inputs = _workload_parts(workload, seed or 0), workload.key
        options["rtol"] = workload.tolerance.rtol
    run = _Run(
        options,
        seed,
        inputs,
        cache,
        builtin_heuristics,
        sys.stderr.isatty() if progress is None else progress,
        replay,
    )
    if devices not in (None, "all"):
        raise ValueError(f"tune: devices={devices!r} is not 'all' or None")
    if executor == "local":
        if devices is not None:
            raise ValueError("tune: devices='all' needs a Ray executor (executor='ray')")
        with _Progress(run.progress) as shown:
            return run.tune(parts, as_device(device), shown.line())
    if device is not None:
        raise ValueError("tune: with a Ray executor the workers' devices are tuned; omit device")
    from .distributed import RayExecutor

    if isinstance(executor, RayExecutor):
        return _tune_on_ray(run, parts, executor, devices)
    if executor != "ray":
        raise ValueError(f"tune: executor={executor!r} is not 'local', 'ray' or a RayExecutor")
    # Workers this call started are stopped when it ends, also by an
    # error or Ctrl-C (whose traceback would otherwise keep them alive).
    with RayExecutor() as ray:
        return _tune_on_ray(run, parts, ray, devices)


def _recorded_fields(recording: str, fields: list[str] | None) -> list[str] | None:
    """The fields a replayed run tunes: the recording's (no other point
    was measured); ``fields``, where given, must be those."""
    try:
        recorded = list(json.loads(recording)["fields"])
    except (ValueError, KeyError, TypeError):
        return fields  # not a recording: the native side says what is wrong
    if fields is not None and sorted(fields) != sorted(recorded):
        raise ValueError(f"tune: the recording covers the fields {recorded}, not {fields}")
    return recorded


def _workload_parts(workload: Workload, seed: int) -> list[_Part]:
    """:func:`_parts` of a workload's payload, checked on its inputs and
    on its reference's outputs for them (cached by the workload: shared
    with the engine), each converted to the output's dtype."""
    f, expected = workload.payload, workload.expected(seed)
    if len(expected) != len(f.outputs):
        raise ValueError(
            f"tune: {workload.label}'s reference gave {len(expected)} outputs, "
            f"the fusion has {len(f.outputs)}"
        )
    outs = zip(expected, f.outputs, strict=True)
    wanted: Arrays = tuple(np.asarray(e, dtype=NUMPY_DTYPES[t.dtype]) for e, t in outs)
    return _parts(f, workload.inputs(seed), wanted)


def _tune_on_ray(
    run: _Run,
    parts: list[_Part],
    ray: RayExecutor,
    devices: Literal["all"] | None,
) -> TuneResult | dict[str, TuneResult]:
    groups = ray.groups()
    if devices is None and len(groups) > 1:
        raise ValueError(
            f"tune: the Ray workers have {len(groups)} device fingerprints "
            f"({', '.join(groups)}); pass devices='all' to tune for each"
        )
    with _Progress(run.progress) as shown:
        if len(groups) == 1:
            ((fp, (d, actors)),) = groups.items()
            found = {fp: run.tune(parts, d, shown.line(), actors)}
        else:
            found = _concurrently(run, parts, groups, shown)
    return found if devices == "all" else next(iter(found.values()))


def _concurrently(
    run: _Run,
    parts: list[_Part],
    groups: dict[str, tuple[RemoteDevice, list[Any]]],
    shown: _Progress,
) -> dict[str, TuneResult]:
    """Tunes for every device group at once, a thread each (their waits
    on Ray release the GIL); Ctrl-C or an error in one stops them all."""
    from .distributed import Stopped

    stop = threading.Event()
    with ThreadPoolExecutor(len(groups), thread_name_prefix="tilefuse-tune") as pool:
        futures = {
            fp: pool.submit(
                run.tune, parts, d, shown.line(f" on {d.info['name']} ({fp})"), actors, stop
            )
            for fp, (d, actors) in groups.items()
        }
        try:
            wait(futures.values(), return_when=FIRST_EXCEPTION)
        finally:
            stop.set()
    errors = [e for f in futures.values() if (e := f.exception()) is not None]
    if first := next((e for e in errors if not isinstance(e, Stopped)), None):
        raise first
    return {fp: f.result() for fp, f in futures.items()}


@dataclass
class _Run:
    """One :func:`tune` call's settings, applied to each device tuned."""

    options: dict[str, Any]
    seed: int | None
    #: What candidates run on: a workload's key, or ``"random"``.
    inputs: str
    cache: bool
    builtin_heuristics: bool
    progress: bool
    #: A recorded space whose times are read instead of measured.
    replay: str | None = None

    def tune(
        self,
        parts: list[_Part],
        device: DeviceFacts,
        show: _Shown,
        actors: list[Any] | None = None,
        stop: threading.Event | None = None,
    ) -> TuneResult:
        """Tunes each part on ``device`` (or on the Ray ``actors`` that own
        it, until ``stop`` is set), shows each trial, and caches the
        winners."""
        results = [self._part(p, device, actors, show, stop) for p in parts]
        if self.cache:
            for p, r in zip(parts, results, strict=True):
                _cache.store(
                    p.fusion,
                    device,
                    r["best_params"],
                    r["best_time"],
                    r["default_time"],
                    len(r["trials"]),
                    r["strategy"],
                    [h["name"] for h in r["heuristics"]],
                    r["best_samples"],
                    r["space"],
                )
        return _result(results, listed=parts[0].segment)

    def _part(
        self,
        part: _Part,
        device: DeviceFacts,
        actors: list[Any] | None,
        show: _Shown,
        stop: threading.Event | None,
    ) -> dict[str, Any]:
        from .device import Device
        from .distributed import Problem, RayGroup

        f, seed = part.fusion, self.seed or 0
        journal = Journal.of(f, device, self.inputs, seed) if self.cache else Journal(None)
        kind = f.features()["scheduler"]
        options = {
            **self.options,
            "seed": self.seed,
            "fingerprint": device.fingerprint,
            "warm_start": _cache.warm_start(f, device, kind) if self.cache else [],
            "recorded": journal.recorded(),
        }

        def observe(trial: dict[str, Any], best: float | None) -> None:
            journal.append(trial)
            show(trial, best)

        seeders = _heuristic.for_tuning(f, device, kind)
        target: Any = device._native if isinstance(device, Device) else device.info
        group = None
        if actors is not None:
            rtol = self.options.get("rtol", Tolerance.rtol)
            problem = Problem(f.to_json(), seed, part.inputs, part.expected, rtol, self.replay)
            group = RayGroup(actors, problem, stop)
        r = _native.tune(
            f._native,
            target,
            options,
            observe,
            seeders,
            self.builtin_heuristics,
            part.inputs,
            part.expected,
            group,
            self.replay,
        )
        journal.finish()
        if group is not None and (losses := group.losses()):
            r["warnings"].append(losses)
        for message in r["warnings"]:
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        return r


def _result(results: list[dict[str, Any]], listed: bool) -> TuneResult:
    """One result of the native tuner's per-segment results (``listed``:
    the params of each segment, in a list)."""
    params = [HeuristicParams.from_dict(r["best_params"]) for r in results]
    default = [next(t["params"] for t in r["trials"] if t["origin"] == "default") for r in results]
    started = [HeuristicParams.from_dict(d) for d in default]
    defaults = [r["default_time"] for r in results]
    one = not listed
    return TuneResult(
        best_params=params[0] if one else params,  # type: ignore[arg-type]
        best_time=sum(r["best_time"] for r in results),
        default_time=None if None in defaults else sum(defaults),
        trials=[Trial.from_dict(t) for r in results for t in r["trials"]],
        heuristics=[h for r in results for h in r["heuristics"]],
        scheduler=results[0]["scheduler"] if one else [r["scheduler"] for r in results],
        strategy=results[0]["strategy"],
        elapsed=sum(r["elapsed"] for r in results),
        default_params=started[0] if one else started,  # type: ignore[arg-type]
        # A confirmed segment has more rounds than the others.
        best_samples=[sum(t) for t in zip(*(r["best_samples"] for r in results), strict=False)],
    )
