"""The execution engine (seed 004): one place that inspects, lowers, runs,
verifies and times workloads on a device.

    engine = tilefuse.Engine(tilefuse.Device.cpu())
    w = tilefuse.workloads.get("softmax", rows=1024, cols=1024)
    engine.inspect(w)                 # plain data per segment
    r = engine.benchmark(w)           # a BenchResult: samples, quantiles,
    print(r.median, r.gbps)           # GFLOP/s, GB/s, verification
    engine.compare(w, {"default": None, "mine": my_params})

Kernels are built once per workload and params; inputs and references
once per workload and seed (the workload caches them), so thousands of
runs pay for neither again.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import platform
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from . import _native, timing
from .complexity import Complexity
from .device import Device, DeviceName, as_device
from .params import HeuristicParams
from .pipeline import Pipeline, load_pipeline
from .schedule import Kernel
from .segments import SegmentedKernel
from .timing import Budget, CacheFlush, Sampler, call_sampler, interleave
from .workload import Verification, Workload, WorkloadLike, as_workload, compare_outputs

__all__ = ["BenchResult", "Engine", "ParamsLike", "Variant", "VerificationError"]

ParamsLike = HeuristicParams | dict[str, Any] | Sequence[HeuristicParams | dict[str, Any]] | None

#: What a variant may be: params (``None``: the cache's or the default
#: heuristic's), a pipeline (loaded, or its name or file), or a kernel
#: built beforehand.
Variant = ParamsLike | Pipeline | str | Kernel | SegmentedKernel

#: What ``measure=`` may time: the kernel alone (its own timer: GPU
#: timestamps where the adapter has them) or the whole call ``k(*arrays)``.
MEASURES = ("kernel", "call")


class VerificationError(_native.TilefuseError):
    """A kernel's outputs differ from the reference beyond the tolerance;
    ``.verification`` holds the comparison."""

    def __init__(self, message: str, verification: Verification) -> None:
        super().__init__(message)
        self.verification = verification


VerificationError.__module__ = "tilefuse"


@dataclass(frozen=True)
class BenchResult:
    """One variant of one workload, timed."""

    workload: str
    variant: str
    #: ``"kernel"`` or ``"call"`` (see :data:`MEASURES`).
    measure: str
    #: Seconds per launch, every timed sample in order.
    samples: list[float]
    complexity: Complexity
    verification: Verification | None
    #: Device, driver, versions, params hash and date of the run.
    environment: dict[str, Any]
    #: The device's peak ``{"gflops": ..., "gbps": ...}`` where known.
    peak: dict[str, float] = field(default_factory=dict)
    #: Median seconds of the workload's numpy form, where it was timed.
    numpy_seconds: float | None = None

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.samples, q))

    @property
    def median(self) -> float:
        return self.quantile(0.5)

    @property
    def p20(self) -> float:
        return self.quantile(0.2)

    @property
    def p80(self) -> float:
        return self.quantile(0.8)

    @property
    def gflops(self) -> float:
        """GFLOP/s at the median time."""
        return self.complexity.gflops(self.median)

    @property
    def gbps(self) -> float:
        """GB/s at the median time (compulsory traffic)."""
        return self.complexity.gbps(self.median)

    @property
    def fraction_of_peak(self) -> dict[str, float]:
        """``{"gflops": ..., "gbps": ...}`` as fractions of the known peaks."""
        got = {"gflops": self.gflops, "gbps": self.gbps}
        return {k: got[k] / peak for k, peak in self.peak.items() if peak > 0}

    @property
    def speedup_over_numpy(self) -> float | None:
        """The numpy form's median over this one (> 1: faster than numpy)."""
        return None if self.numpy_seconds is None else self.numpy_seconds / self.median

    def summary(self) -> dict[str, Any]:
        """One flat row: names, statistics, throughput, verification."""
        v = self.verification
        return {
            "workload": self.workload,
            "variant": self.variant,
            "measure": self.measure,
            "device": self.environment.get("device"),
            "median_s": self.median,
            "p20_s": self.p20,
            "p80_s": self.p80,
            "min_s": min(self.samples),
            "max_s": max(self.samples),
            "samples": len(self.samples),
            "gflops": self.gflops,
            "gbps": self.gbps,
            **{f"{k}_fraction_of_peak": x for k, x in self.fraction_of_peak.items()},
            "numpy_median_s": self.numpy_seconds,
            "speedup_over_numpy": self.speedup_over_numpy,
            **self.complexity.to_dict(),
            "verified": None if v is None else v.passed,
            "max_abs_error": None if v is None else v.max_abs_error,
            "max_rel_error": None if v is None else v.max_rel_error,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "sample_seconds": list(self.samples),
            "verification": None if self.verification is None else self.verification.to_dict(),
            "environment": self.environment,
            "peak": self.peak,
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """The result as JSON: one line, or indented by ``indent`` spaces."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_csv(self, header: bool = True) -> str:
        """The :meth:`summary` row as CSV (floats at full precision)."""
        return to_csv([self], header)


def to_csv(results: Sequence[BenchResult], header: bool = True) -> str:
    """Every result's :meth:`BenchResult.summary` row as CSV, full
    precision (``repr`` of each float)."""
    import csv
    import io

    rows = [r.summary() for r in results]
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(
        {k: repr(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows
    )
    return out.getvalue()


class Engine:
    """Runs workloads on one device. ``peak_gflops`` / ``peak_gbps``, where
    you know them, make results report fractions of the device's peak."""

    def __init__(
        self,
        device: Device | DeviceName | None = None,
        *,
        peak_gflops: float | None = None,
        peak_gbps: float | None = None,
    ) -> None:
        self.device = as_device(device)
        self.peak = {
            k: float(v) for k, v in (("gflops", peak_gflops), ("gbps", peak_gbps)) if v is not None
        }
        self._kernels: dict[tuple[str, str], Kernel | SegmentedKernel] = {}

    def __repr__(self) -> str:
        return f"Engine({self.device!r})"

    # --- what a workload is ---------------------------------------------------
    def inspect(self, workload: WorkloadLike) -> list[dict[str, Any]]:
        """Plain data per segment: scheduler, input and output shapes,
        reductions (op, shape, axes), matmuls (batch, m, n, k, transposes)
        and complexity."""
        w = as_workload(workload)
        return [
            {
                "scheduler": seg.scheduler,
                "inputs": [list(t.shape) for t in seg.inputs],
                "outputs": [list(t.shape) for t in seg.outputs],
                **seg.fusion._native.summary(),
            }
            for seg in w.payload.segments()
        ]

    # --- lowering and running ---------------------------------------------------
    def resolve(self, workload: WorkloadLike, params: ParamsLike = None) -> list[dict[str, Any]]:
        """The params ``lower`` uses, one dict per segment: ``params`` as
        given, or the heuristic cache's / default heuristic's for this
        device when ``None``."""
        w = as_workload(workload)
        if params is None:
            params = w.payload.heuristics(device=self.device)
        given = params if isinstance(params, Sequence) else [params]
        for p in given:
            if not isinstance(p, HeuristicParams | Mapping):
                raise TypeError(
                    "params: expected params (a HeuristicParams or its dict), a list of them "
                    f"per segment, a pipeline or a kernel, got {type(p).__name__}"
                )
        return [p.to_dict() if isinstance(p, HeuristicParams) else dict(p) for p in given]

    def lower(
        self,
        workload: WorkloadLike,
        params: ParamsLike = None,
        pipeline: Pipeline | str | None = None,
    ) -> Kernel | SegmentedKernel:
        """The kernel(s) for ``workload`` with ``params``, or made by the
        select, schedule and apply stages of ``pipeline`` (a loaded
        :class:`~tilefuse.pipeline.Pipeline`, a name or a file); built once
        per workload and params or pipeline."""
        w = as_workload(workload)
        if pipeline is not None:
            if params is not None:
                raise ValueError("lower: give params or a pipeline, not both")
            return self._from_pipeline(w, pipeline)[0]
        self._require(w)
        resolved = self.resolve(w, params)
        key = (w.key, _digest(resolved))
        if key not in self._kernels:
            # The kernel's kind follows the params alone, as its key does.
            given = resolved if len(resolved) > 1 else resolved[0]
            self._kernels[key] = w.payload.schedule(given, self.device)
        return self._kernels[key]

    def _require(self, w: Workload) -> None:
        """Raises ``DeviceError`` naming what this device lacks for ``w``."""
        problems = w.requirements().unmet(self.device.info)
        if problems:
            raise _native.DeviceError(f"workload {w.key}: {'; '.join(problems)}")

    def _from_pipeline(
        self, w: Workload, pipeline: Pipeline | str
    ) -> tuple[Kernel | SegmentedKernel, str]:
        """The kernel the pipeline's build stages make, and the pipeline's
        digest (which reads the files it names: taken once)."""
        from .stages import BUILD_STAGES, run

        self._require(w)
        p = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
        digest = p.digest
        key = (w.key, f"pipeline {digest}")
        if key not in self._kernels:
            self._kernels[key] = run(p, w, self, only=BUILD_STAGES).kernel()
        return self._kernels[key], digest

    def _variant(
        self, w: Workload, variant: Variant
    ) -> tuple[Kernel | SegmentedKernel, dict[str, Any]]:
        """A variant's kernel, and the hashes that identify it in results."""
        hashes: dict[str, Any] = {"params_hash": None, "pipeline_hash": None}
        if isinstance(variant, Kernel | SegmentedKernel):
            kernel = variant
        elif isinstance(variant, Pipeline | str):
            kernel, hashes["pipeline_hash"] = self._from_pipeline(w, variant)
        else:
            # Resolved once, so the params timed are the params hashed even
            # if the heuristic cache changes meanwhile.
            resolved = self.resolve(w, variant)
            kernel, hashes["params_hash"] = self.lower(w, resolved), _digest(resolved)
        schedules = kernel.kernels if isinstance(kernel, SegmentedKernel) else [kernel]
        traces = [None if k.schedule is None else k.schedule.trace for k in schedules]
        return kernel, {**hashes, "schedule_hash": _digest(traces)}

    def execute(
        self, workload: WorkloadLike, params: Variant = None, check: bool = True, seed: int = 0
    ) -> tuple[np.ndarray, ...]:
        """Runs on the inputs for ``seed``; returns the outputs. With
        ``check``, raises :class:`VerificationError` when they differ from
        the reference beyond the workload's tolerance. ``params`` is any
        :data:`Variant`."""
        w = as_workload(workload)
        outs = _outputs(self._variant(w, params)[0], w, seed)
        if check:
            _raise_if_failed(w, compare_outputs(outs, w.expected(seed), w.tolerance))
        return outs

    def verify(self, workload: WorkloadLike, params: Variant = None, seed: int = 0) -> Verification:
        """The outputs for ``seed`` compared with the reference: max
        absolute and relative errors and the tolerance used."""
        w = as_workload(workload)
        outs = _outputs(self._variant(w, params)[0], w, seed)
        return compare_outputs(outs, w.expected(seed), w.tolerance)

    # --- timing -------------------------------------------------------------------
    def benchmark(
        self,
        workload: WorkloadLike,
        params: Variant = None,
        check: bool = True,
        *,
        pipeline: Pipeline | str | None = None,
        variant: str = "default",
        measure: str = "kernel",
        budget: Budget | None = None,
        flush: bool = False,
        seed: int = 0,
    ) -> BenchResult:
        """Times ``workload`` with ``params`` (any :data:`Variant`) or
        ``pipeline`` (time-based warm-up and repetitions, see
        :class:`~tilefuse.timing.Budget`); with ``check`` the outputs are
        verified first (a failure raises :class:`VerificationError`).
        ``flush`` evicts the CPU caches before each sample (CPU device
        only)."""
        if pipeline is not None and params is not None:
            raise ValueError("benchmark: give params or a pipeline, not both")
        return self.compare(
            workload,
            {variant: params if pipeline is None else pipeline},
            check,
            measure=measure,
            budget=budget,
            flush=flush,
            seed=seed,
            rounds=1,
        )[variant]

    def compare(
        self,
        workload: WorkloadLike,
        variants: Mapping[str, Variant],
        check: bool = True,
        *,
        measure: str = "kernel",
        budget: Budget | None = None,
        flush: bool = False,
        seed: int = 0,
        rounds: int = 5,
    ) -> dict[str, BenchResult]:
        """Times named variants (params, pipelines or kernels, see
        :data:`Variant`) interleaved in one run (chunks in a rotating order,
        ``rounds`` per variant), so a drifting machine slows them alike; one
        :class:`BenchResult` per variant."""
        w = as_workload(workload)
        if measure not in MEASURES:
            raise ValueError(f"benchmark: measure must be one of {MEASURES}, got {measure!r}")
        if flush and self.device.is_gpu:
            raise ValueError("benchmark: flush evicts CPU caches; it applies to the CPU device")
        built = {n: self._variant(w, v) for n, v in variants.items()}
        checks = {
            n: compare_outputs(_outputs(k, w, seed), w.expected(seed), w.tolerance)
            if check
            else None
            for n, (k, _) in built.items()
        }
        for verification in checks.values():
            if verification is not None:
                _raise_if_failed(w, verification)
        samplers = {n: _sampler(k, w.inputs(seed), measure) for n, (k, _) in built.items()}
        timed = interleave(samplers, budget or Budget(), rounds, CacheFlush() if flush else None)
        return {
            n: BenchResult(
                w.key,
                n,
                measure,
                timed[n],
                w.complexity(),
                checks[n],
                self._environment(built[n][1]),
                dict(self.peak),
            )
            for n in variants
        }

    def time_numpy(self, workload: WorkloadLike, budget: Budget | None = None) -> list[float]:
        """Samples of the workload's numpy form on the inputs for seed 0,
        timed as the call a user makes."""
        w = as_workload(workload)
        sampler = call_sampler(functools.partial(w.numpy, *w.inputs()))
        return timing.measure(sampler, budget or Budget())

    def with_numpy(
        self, result: BenchResult, workload: WorkloadLike, budget: Budget | None = None
    ) -> BenchResult:
        """``result`` with the median of :meth:`time_numpy` beside it."""
        samples = self.time_numpy(workload, budget)
        return dataclasses.replace(result, numpy_seconds=statistics.median(samples))

    def _environment(self, hashes: dict[str, Any]) -> dict[str, Any]:
        info = self.device.info
        return {
            "device": info["name"],
            "backend": info["backend"],
            "driver": info["driver"],
            "device_fingerprint": self.device.fingerprint,
            "tilefuse": _native.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            **hashes,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }


def _outputs(kernel: Kernel | SegmentedKernel, w: Workload, seed: int) -> tuple[np.ndarray, ...]:
    outs = kernel(*w.inputs(seed))
    return outs if isinstance(outs, tuple) else (outs,)


def _sampler(
    kernel: Kernel | SegmentedKernel, inputs: tuple[np.ndarray, ...], what: str
) -> Sampler:
    if what == "call" or isinstance(kernel, SegmentedKernel):
        return call_sampler(lambda: kernel(*inputs))
    return lambda warmup, repeat: kernel.benchmark(*inputs, warmup=warmup, repeat=repeat).samples


def _digest(data: Any) -> str:
    """16 hex digits of the JSON of ``data`` (keys sorted)."""
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _raise_if_failed(w: Workload, verification: Verification) -> None:
    if not verification.passed:
        raise VerificationError(
            f"workload {w.key}: {verification.mismatch} "
            f"(rtol {verification.tolerance.rtol}, max abs error {verification.max_abs_error:.3g})",
            verification,
        )
