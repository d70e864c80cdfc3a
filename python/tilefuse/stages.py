"""What each pipeline stage does (:mod:`tilefuse.pipeline` loads the
files). A run carries one workload through the stages in order:

- ``inspect`` records :meth:`Engine.inspect` (``save:`` writes it as JSON).
- ``select`` picks params per segment: ``heuristics`` (the default
  heuristic), ``cache`` (a tuned winner where the heuristic cache has one),
  ``file`` (a params file, see :mod:`tilefuse.paramsfile`; one written for
  another fusion or device warns and falls back to ``fallback``, by
  default ``cache``), ``tune`` (:func:`tilefuse.tune` with those options)
  or ``selector`` (``module:function(inspection, device) -> params``, the
  inspection being :meth:`Engine.inspect`'s list). ``save:`` writes them.
- ``schedule`` makes one schedule per segment: ``auto`` (the automatic
  scheduler with the selected params; the ``cache`` selector's when no
  ``select`` stage ran), ``trace`` (a recorded ``Schedule.trace`` per
  segment, replayed) or ``function`` (``module:function(fusion, device)
  -> Schedule``, called per segment).
- ``apply`` adds primitives to one segment's schedule (``segment:``, needed
  when there are several): a ``trace`` file, inline ``primitives`` (trace
  records) or a ``function(schedule)`` that applies them by hand.
- ``emit`` writes the kernel as WGSL and JSON (``Kernel.export``).
- ``benchmark`` times the kernel on the engine (verified first unless
  ``check: false``); ``numpy: true`` times the workload's numpy form too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import paramsfile
from .pipeline import Pipeline, Stage, resolve_callable
from .schedule import Kernel, Schedule
from .segments import SegmentedKernel
from .suite import located_workload
from .timing import Budget
from .workload import Workload, as_workload

if TYPE_CHECKING:
    from .engine import BenchResult, Engine
    from .fusion import Fusion

__all__ = ["BUILD_STAGES", "PipelineRun", "run", "workload_of"]

#: The stages that make the kernel (what ``Engine.lower(pipeline=...)`` runs).
BUILD_STAGES = ("select", "schedule", "apply")


@dataclass
class PipelineRun:
    """One workload carried through a pipeline: what each stage made."""

    pipeline: Pipeline
    workload: Workload
    engine: Engine
    inspection: list[dict[str, Any]] | None = None
    #: The selected params, one dict per segment, and where they came from.
    params: list[dict[str, Any]] | None = None
    params_source: str = ""
    schedules: list[Schedule] | None = None
    files: list[Path] = field(default_factory=list)
    bench: BenchResult | None = None
    #: One line per stage run.
    log: list[str] = field(default_factory=list)
    _kernel: Kernel | SegmentedKernel | None = None

    @property
    def fusion(self) -> Fusion:
        return self.workload.payload

    def kernel(self) -> Kernel | SegmentedKernel:
        """The kernel(s) of the schedules so far, built once."""
        if self._kernel is None:
            if self.schedules is None:
                _schedule(self, Stage("schedule", "auto", self.pipeline.path, 0, "(implicit)"))
            assert self.schedules is not None
            device = self.engine.device
            kernels = [s.build(device) for s in self.schedules]
            if self.fusion._segmented():
                self._kernel = SegmentedKernel(self.fusion, self.fusion.segments(), kernels, device)
            else:
                self._kernel = kernels[0]
        return self._kernel

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": str(self.pipeline.path),
            "workload": self.workload.key,
            "device": self.engine.device.info["name"],
            "log": self.log,
            "inspection": self.inspection,
            "params": self.params,
            "params_source": self.params_source,
            "files": [str(f) for f in self.files],
            "benchmark": None if self.bench is None else self.bench.to_dict(),
        }


def run(
    pipeline: Pipeline,
    workload: Workload,
    engine: Engine,
    only: tuple[str, ...] | None = None,
    progress: Callable[[Stage], None] | None = None,
) -> PipelineRun:
    """Runs the stages of ``pipeline`` (those of kinds in ``only``, where
    given) on ``workload``; ``progress(stage)`` is called before each."""
    state = PipelineRun(pipeline, workload, engine)
    for stage in pipeline.stages:
        if only is not None and stage.kind not in only:
            continue
        if progress is not None:
            progress(stage)
        _RUNNERS[stage.kind](state, stage)
    return state


def workload_of(pipeline: Pipeline) -> Workload | None:
    """The workload the pipeline file names (``workload:``), if any."""
    spec = pipeline.workload
    if spec is None:
        return None
    if "fusion" in spec:
        return as_workload(pipeline.path.parent / spec["fusion"])
    sizes = dict(spec.get("sizes", {}))
    return located_workload(pipeline.path, spec, "name", "workload", sizes)


# --- the stages -----------------------------------------------------------------------
def _inspect(state: PipelineRun, stage: Stage) -> None:
    state.inspection = state.engine.inspect(state.workload)
    kinds = ", ".join(s["scheduler"] for s in state.inspection)
    state.log.append(f"inspect: {len(state.inspection)} segment(s): {kinds}")
    if stage.options and "save" in stage.options:
        _save(state, stage.file(stage.options["save"]), json.dumps(state.inspection, indent=2))


def _select(state: PipelineRun, stage: Stage) -> None:
    given = stage.options or "cache"
    options: dict[str, Any] = {given: True} if isinstance(given, str) else dict(given)
    params, source = _selected(state, stage, options)
    state.params, state.params_source = params, source
    state._kernel, state.schedules = None, None
    state.log.append(f"select: {source}")
    if "save" in options:
        target = stage.file(options["save"])
        paramsfile.save(target, state.fusion, state.engine.device, params, source)
        state.files.append(target)


def _selected(
    state: PipelineRun, stage: Stage, options: dict[str, Any]
) -> tuple[list[dict[str, Any]], str]:
    """The params ``options`` pick and a line saying where from."""
    f, device, engine = state.fusion, state.engine.device, state.engine
    if "heuristics" in options:
        return engine.resolve(state.workload, f.heuristics(device=device, cache=False)), (
            "default heuristic"
        )
    if "file" in options:
        target = stage.file(options["file"])
        if not target.is_file():
            raise stage.error(f"no file {target}", "file")
        loaded = paramsfile.load(target, f, device)
        if loaded is not None:
            return loaded, f"file {target}"
        params, source = _selected(state, stage, {options.get("fallback", "cache"): True})
        return params, f"{source} (fallback: {target.name} is for another fusion or device)"
    if "tune" in options:
        from .tune import tune

        tuning = dict(options["tune"])
        r = tune(f, device, **tuning)
        best = r.best_params if isinstance(r.best_params, list) else [r.best_params]
        speedup = f", {r.speedup:.2f}x the default" if r.speedup else ""
        return engine.resolve(state.workload, best), (
            f"tune {r.strategy}, {len(r.trials)} trials{speedup}"
        )
    if "selector" in options:
        return _from_selector(state, stage, options["selector"])
    return engine.resolve(state.workload, None), f.params_source(device)


def _from_selector(
    state: PipelineRun, stage: Stage, reference: str
) -> tuple[list[dict[str, Any]], str]:
    selector = resolve_callable(reference, stage.path.parent)
    inspection = state.inspection or state.engine.inspect(state.workload)
    try:
        chosen = selector(inspection, state.engine.device)
        params = state.engine.resolve(state.workload, chosen)
    except Exception as e:
        raise stage.error(f"{reference} raised {type(e).__name__}: {e}", "selector") from e
    segments = len(state.fusion._parts())
    if len(params) != segments:
        raise stage.error(
            f"{reference} returned {len(params)} params for {segments} segment(s)",
            "selector",
        )
    return params, f"selector {reference}"


def _schedule(state: PipelineRun, stage: Stage) -> None:
    options = stage.options
    device, parts = state.engine.device, state.fusion._parts()
    if options is None or options == "auto":
        if state.params is None:
            _select(state, Stage("select", "cache", stage.path, stage.line, stage.key))
        assert state.params is not None
        made = [f._auto_schedule(p, device) for f, p in zip(parts, state.params, strict=True)]
        how = "auto"
    elif "trace" in options:
        files = options["trace"] if isinstance(options["trace"], list) else [options["trace"]]
        if len(files) != len(parts):
            raise stage.error(f"{len(files)} trace(s) for {len(parts)} segment(s)", "trace")
        made = [
            _located(stage, "trace", functools.partial(_replay, f, stage.file(t)))
            for f, t in zip(parts, files, strict=True)
        ]
        how = f"trace {', '.join(files)}"
    else:
        function = resolve_callable(options["function"], stage.path.parent)
        made = [_by_hand(stage, function, f, device) for f in parts]
        how = f"function {options['function']}"
    state.schedules, state._kernel = made, None
    state.log.append(f"schedule: {how} ({len(made)} schedule(s))")


def _replay(f: Fusion, trace: Path) -> Schedule:
    return Schedule.replay(f, trace.read_text())


def _by_hand(stage: Stage, function: Callable[..., Any], f: Fusion, device: Any) -> Schedule:
    got = _located(stage, "function", lambda: function(f, device))
    got = got.schedule if isinstance(got, Kernel) else got
    if not isinstance(got, Schedule):
        raise stage.error(f"returned {type(got).__name__}, not a Schedule", "function")
    return got


def _apply(state: PipelineRun, stage: Stage) -> None:
    options = stage.options
    if state.schedules is None:
        raise stage.error("needs a schedule stage before it")
    segment = options.get("segment", 0 if len(state.schedules) == 1 else None)
    if segment is None or segment >= len(state.schedules):
        raise stage.error(f"name one of the {len(state.schedules)} segments (0-based)", "segment")
    s = state.schedules[segment]
    if "function" in options:
        function = resolve_callable(options["function"], stage.path.parent)
        returned = _located(stage, "function", lambda: function(s))
        s = returned if isinstance(returned, Schedule) else s
        how = f"function {options['function']}"
    else:
        extra = options.get("primitives")
        if extra is None:
            text = _located(stage, "trace", stage.file(options["trace"]).read_text)
            extra = _located(stage, "trace", lambda: json.loads(text))
        combined = json.dumps([*json.loads(s.trace), *extra])
        option = "primitives" if "primitives" in options else "trace"
        s = _located(stage, option, lambda: Schedule.replay(s.recorded_fusion, combined))
        how = f"{len(extra)} primitive(s)"
    state.schedules[segment], state._kernel = s, None
    state.log.append(f"apply: {how} on segment {segment}")


def _emit(state: PipelineRun, stage: Stage) -> None:
    options = stage.options
    kernel = state.kernel()
    target = _located(
        stage,
        "directory",
        lambda: kernel.export(stage.file(options["directory"]), options.get("name", "kernel")),
    )
    state.files.append(target)
    state.log.append(f"emit: {target}")


def _benchmark(state: PipelineRun, stage: Stage) -> None:
    options = dict(stage.options or {})
    defaults = Budget()
    budget = Budget(
        warmup=options.get("warmup_ms", defaults.warmup * 1e3) / 1e3,
        rep=options.get("rep_ms", defaults.rep * 1e3) / 1e3,
    )
    r = state.engine.benchmark(
        state.workload,
        state.kernel(),
        options.get("check", True),
        variant=state.pipeline.name,
        measure=options.get("measure", "kernel"),
        budget=budget,
        flush=options.get("flush", False),
    )
    if options.get("numpy") and state.workload.has_numpy:
        r = state.engine.with_numpy(r, state.workload, budget)
    state.bench = r
    state.log.append(f"benchmark: median {r.median * 1e3:.4g} ms, {r.gbps:.3g} GB/s")
    if "save" in options:
        _save(state, stage.file(options["save"]), r.to_json(indent=2))


def _save(state: PipelineRun, target: Path, text: str) -> None:
    """Writes a stage's ``save:`` file (folders made as needed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n")
    state.files.append(target)


def _located(stage: Stage, option: str, action: Callable[[], Any]) -> Any:
    """``action()``, its errors re-raised naming the stage's file, line and
    option (the original is chained)."""
    try:
        return action()
    except Exception as e:
        raise stage.error(f"{type(e).__name__}: {e}", option) from e


_RUNNERS: dict[str, Callable[[PipelineRun, Stage], None]] = {
    "inspect": _inspect,
    "select": _select,
    "schedule": _schedule,
    "apply": _apply,
    "emit": _emit,
    "benchmark": _benchmark,
}
