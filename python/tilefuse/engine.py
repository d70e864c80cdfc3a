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

import hashlib
import json
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from . import _native
from .complexity import Complexity
from .params import HeuristicParams
from .schedule import Device, Kernel
from .segments import SegmentedKernel
from .timing import Budget, CacheFlush, Sampler, call_sampler, interleave
from .workload import Verification, Workload, WorkloadLike, as_workload, compare_outputs

__all__ = ["BenchResult", "Engine", "ParamsLike", "VerificationError"]

ParamsLike = HeuristicParams | dict[str, Any] | Sequence[HeuristicParams | dict[str, Any]] | None

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

    def to_json(self, indent: int | None = 2) -> str:
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
        device: Device | None = None,
        *,
        peak_gflops: float | None = None,
        peak_gbps: float | None = None,
    ) -> None:
        self.device = device or Device.default()
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
        return [p.to_dict() if isinstance(p, HeuristicParams) else dict(p) for p in given]

    def lower(self, workload: WorkloadLike, params: ParamsLike = None) -> Kernel | SegmentedKernel:
        """The kernel(s) for ``workload`` with ``params``, built once per
        workload and params."""
        w = as_workload(workload)
        problems = w.requirements().unmet(self.device.info)
        if problems:
            raise _native.DeviceError(f"workload {w.key}: {'; '.join(problems)}")
        resolved = self.resolve(w, params)
        key = (w.key, _digest(resolved))
        if key not in self._kernels:
            # The kernel's kind follows the params alone, as its key does.
            given = resolved if len(resolved) > 1 else resolved[0]
            self._kernels[key] = w.payload.schedule(given, self.device)
        return self._kernels[key]

    def execute(
        self, workload: WorkloadLike, params: ParamsLike = None, check: bool = True, seed: int = 0
    ) -> tuple[np.ndarray, ...]:
        """Runs on the inputs for ``seed``; returns the outputs. With
        ``check``, raises :class:`VerificationError` when they differ from
        the reference beyond the workload's tolerance."""
        w = as_workload(workload)
        outs = self._run(w, params, seed)
        if check:
            _raise_if_failed(w, compare_outputs(outs, w.expected(seed), w.tolerance))
        return outs

    def verify(
        self, workload: WorkloadLike, params: ParamsLike = None, seed: int = 0
    ) -> Verification:
        """The outputs for ``seed`` compared with the reference: max
        absolute and relative errors and the tolerance used."""
        w = as_workload(workload)
        return compare_outputs(self._run(w, params, seed), w.expected(seed), w.tolerance)

    def _run(self, w: Workload, params: ParamsLike, seed: int) -> tuple[np.ndarray, ...]:
        outs = self.lower(w, params)(*w.inputs(seed))
        return outs if isinstance(outs, tuple) else (outs,)

    # --- timing -------------------------------------------------------------------
    def benchmark(
        self,
        workload: WorkloadLike,
        params: ParamsLike = None,
        check: bool = True,
        *,
        variant: str = "default",
        measure: str = "kernel",
        budget: Budget | None = None,
        flush: bool = False,
        seed: int = 0,
    ) -> BenchResult:
        """Times ``workload`` with ``params`` (time-based warm-up and
        repetitions, see :class:`~tilefuse.timing.Budget`); with ``check``
        the outputs are verified first (a failure raises
        :class:`VerificationError`). ``flush`` evicts the CPU caches before
        each sample (CPU device only)."""
        return self.compare(
            workload,
            {variant: params},
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
        variants: Mapping[str, ParamsLike],
        check: bool = True,
        *,
        measure: str = "kernel",
        budget: Budget | None = None,
        flush: bool = False,
        seed: int = 0,
        rounds: int = 5,
    ) -> dict[str, BenchResult]:
        """Times named params variants interleaved in one run (chunks in a
        rotating order, ``rounds`` per variant), so a drifting machine
        slows them alike; one :class:`BenchResult` per variant."""
        w = as_workload(workload)
        if measure not in MEASURES:
            raise ValueError(f"benchmark: measure must be one of {MEASURES}, got {measure!r}")
        if flush and self.device.is_gpu:
            raise ValueError("benchmark: flush evicts CPU caches; it applies to the CPU device")
        # Resolved once, so the params timed are the params hashed even if
        # the heuristic cache changes meanwhile.
        resolved = {n: self.resolve(w, p) for n, p in variants.items()}
        checks = {n: self.verify(w, p, seed) if check else None for n, p in resolved.items()}
        for verification in checks.values():
            if verification is not None:
                _raise_if_failed(w, verification)
        samplers = {n: self._sampler(w, p, measure, seed) for n, p in resolved.items()}
        timed = interleave(samplers, budget or Budget(), rounds, CacheFlush() if flush else None)
        return {
            n: BenchResult(
                w.key,
                n,
                measure,
                timed[n],
                w.complexity(),
                checks[n],
                self._environment(_digest(resolved[n])),
                dict(self.peak),
            )
            for n in variants
        }

    def _sampler(self, w: Workload, params: ParamsLike, what: str, seed: int) -> Sampler:
        kernel, inputs = self.lower(w, params), w.inputs(seed)
        if what == "call":
            return call_sampler(lambda: kernel(*inputs))
        return lambda warmup, repeat: (
            kernel.benchmark(*inputs, warmup=warmup, repeat=repeat).samples
        )

    def _environment(self, params_hash: str) -> dict[str, Any]:
        info = self.device.info
        return {
            "device": info["name"],
            "backend": info["backend"],
            "driver": info["driver"],
            "device_fingerprint": _digest(info),
            "tilefuse": _native.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "params_hash": params_hash,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
        }


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
