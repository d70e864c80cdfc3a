"""The execution engine: inspect, lower, execute, verify, benchmark and
compare, the timing they share, and BenchResult's JSON and CSV."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import tilefuse as tf
from conftest import assert_close, run_exported_with_wgpu_py
from tilefuse.timing import Budget, interleave, measure

QUICK = Budget(warmup=0.005, rep=0.02, min_repeat=3)


def test_inspect_gives_plain_data_per_segment() -> None:
    segs = tf.Engine(tf.Device.cpu()).inspect(tf.workloads.get("attention", seq=40, dim=16))
    assert [s["scheduler"] for s in segs] == ["matmul", "reduction", "matmul"]
    first, soft, last = segs
    assert first["inputs"] == [[40, 16], [40, 16]] and first["outputs"] == [[40, 40]]
    assert first["matmuls"] == [
        {"batch": [], "m": 40, "n": 40, "k": 16, "transpose_a": False, "transpose_b": True}
    ]
    assert [(r["op"], r["axes"]) for r in soft["reductions"]] == [("max", [1]), ("sum", [1])]
    assert last["matmuls"][0]["k"] == 40
    assert json.loads(json.dumps(segs)) == segs  # plain data
    # the per-segment counts add up to the fusion's flops
    total = tf.workloads.get("attention", seq=40, dim=16).complexity().flops
    assert sum(s["complexity"]["flops"] for s in segs) == total


def test_lower_builds_once_per_workload_and_params() -> None:
    engine = tf.Engine(tf.Device.cpu())
    w = tf.workloads.get("softmax", rows=8, cols=64)
    k = engine.lower(w)
    assert engine.lower(w) is k
    assert engine.lower(tf.workloads.get("softmax", rows=8, cols=64)) is k
    params = w.payload.heuristics(device=engine.device).to_dict()
    params["unroll_factor_reduction"] = 2
    other = engine.lower(w, params)
    assert other is not k and engine.lower(w, params) is other
    # a one-element list is the same params: the same kernel, whichever came first
    assert engine.lower(w, [params]) is other
    assert engine.resolve(w, params) == [params]


class _WrongReference(tf.Workload):
    """A workload whose reference is off by one: every check must catch it."""

    name = "wrong_reference"
    defaults: ClassVar[dict[str, tf.workload.Size]] = {"n": 16}

    def fusion(self) -> tf.Fusion:
        f = tf.Fusion()
        f.output(f.input((self.sizes["n"],), name="x") * 2)
        return f

    def reference(self, *inputs: np.ndarray) -> Any:
        return inputs[0] * 2 + 1


def test_a_wrong_result_fails_execute_verify_and_benchmark(device: tf.Device) -> None:
    engine = tf.Engine(device)
    w = _WrongReference()
    v = engine.verify(w)
    assert not v.passed and v.max_abs_error == pytest.approx(1.0)
    assert v.mismatch is not None and v.mismatch.startswith("output 0 at (")
    with pytest.raises(tf.VerificationError, match=r"wrong_reference\(n=16\): output 0") as e:
        engine.execute(w)
    assert e.value.verification == v
    with pytest.raises(tf.VerificationError):
        engine.benchmark(w, budget=QUICK)
    assert engine.execute(w, check=False)[0].shape == (16,)
    assert engine.benchmark(w, check=False, budget=QUICK).verification is None


def test_benchmark_result_statistics_throughput_and_environment(device: tf.Device) -> None:
    w = tf.workloads.get("chain", rows=16, cols=256)
    r = tf.Engine(device, peak_gbps=100.0).benchmark(w, budget=QUICK)
    assert r.workload == w.key and r.variant == "default" and r.measure == "kernel"
    assert len(r.samples) >= QUICK.min_repeat and all(s > 0 for s in r.samples)
    assert min(r.samples) <= r.p20 <= r.median <= r.p80 <= max(r.samples)
    assert r.median == pytest.approx(float(np.median(r.samples)))
    assert r.gflops == pytest.approx(w.complexity().flops / r.median / 1e9)
    assert r.gbps == pytest.approx(w.complexity().bytes / r.median / 1e9)
    assert r.fraction_of_peak == {"gbps": pytest.approx(r.gbps / 100.0)}
    assert r.verification is not None and r.verification.passed
    env = r.environment
    assert env["device"] == device.info["name"] and env["tilefuse"] == tf.__version__
    assert len(env["params_hash"]) == 16 and len(env["device_fingerprint"]) == 16
    assert env["date"].endswith("+00:00")


def test_results_round_trip_through_json_and_csv_at_full_precision() -> None:
    engine = tf.Engine(tf.Device.cpu())
    w = tf.workloads.get("row_sum", rows=8, cols=32)
    r = engine.benchmark(w, budget=QUICK, measure="call")
    data = json.loads(r.to_json())
    assert data["sample_seconds"] == r.samples and data["median_s"] == r.median
    assert data["measure"] == "call" and data["verification"]["passed"] is True
    row = next(csv.DictReader(io.StringIO(r.to_csv())))
    assert float(row["median_s"]) == r.median and float(row["gflops"]) == r.gflops
    assert row["workload"] == w.key and row["verified"] == "True"
    both = tf.engine.to_csv([r, r]).splitlines()
    assert len(both) == 3 and both[1] == both[2]


def test_compare_times_variants_interleaved(device: tf.Device) -> None:
    engine = tf.Engine(device)
    w = tf.workloads.get("softmax", rows=16, cols=128)
    params = w.payload.heuristics(device=device).to_dict()
    params["unroll_factor_reduction"] = 2
    got = engine.compare(w, {"default": None, "unroll 2": params}, budget=QUICK, rounds=3)
    assert list(got) == ["default", "unroll 2"]
    assert got["default"].environment["params_hash"] != got["unroll 2"].environment["params_hash"]
    assert all(r.verification is not None and r.verification.passed for r in got.values())


def test_bad_options_are_refused_with_what_is_wrong(gpu: tf.Device) -> None:
    w = tf.workloads.get("row_sum", rows=4, cols=8)
    with pytest.raises(ValueError, match="measure must be one of"):
        tf.Engine(tf.Device.cpu()).benchmark(w, measure="wall")
    with pytest.raises(ValueError, match="flush evicts CPU caches"):
        tf.Engine(gpu).benchmark(w, flush=True)
    with pytest.raises(ValueError, match="warmup and rep must be >= 0"):
        Budget(rep=-1)
    with pytest.raises(TypeError, match=r"params: expected params .* got int"):
        tf.Engine(tf.Device.cpu()).compare(w, {"three": 3})  # type: ignore[dict-item]


class _GpuOnly(tf.Workload):
    name = "gpu_only"
    defaults: ClassVar[dict[str, tf.workload.Size]] = {"n": 4}

    def fusion(self) -> tf.Fusion:
        f = tf.Fusion()
        f.output(f.input((self.sizes["n"],)) + 1)
        return f

    def requirements(self) -> tf.Requirements:
        return tf.Requirements(device="gpu", limits={"max_workgroup_storage_bytes": 1 << 40})


def test_unmet_requirements_name_what_the_device_lacks() -> None:
    with pytest.raises(
        tf.DeviceError, match=r"gpu_only\(n=4\): needs a gpu device, this one is a cpu"
    ):
        tf.Engine(tf.Device.cpu()).execute(_GpuOnly())
    info = {"backend": "vulkan", "features": [], "limits": {"max_workgroup_storage_bytes": 32768}}
    assert _GpuOnly().requirements().unmet(info) == [
        f"needs max_workgroup_storage_bytes >= {1 << 40}, the device has 32768"
    ]
    assert tf.Requirements(subgroups=True).unmet(info) == [
        "needs subgroup operations, which the device lacks"
    ]


def test_flush_runs_before_every_sample_outside_the_timed_region() -> None:
    events: list[str] = []

    def run(warmup: int, repeat: int) -> list[float]:
        events.append(f"run {warmup} {repeat}")
        return [1e-3] * repeat

    samples = measure(
        run, Budget(warmup=0.002, rep=0.004, min_repeat=2), lambda: events.append("flush")
    )
    assert samples == [1e-3] * 4
    # Only the estimate asks for a warm-up (a GPU kernel's timer warms
    # for 200 ms whenever asked), then times 3 launches by the host clock;
    # the budget's warm-up follows as untimed launches.
    estimate = ["run 1 3", "run 0 3"]
    assert events == [*estimate, "run 0 2"] + ["flush", "run 0 1"] * 4
    events.clear()
    assert measure(run, Budget(warmup=0.002, rep=0.004, min_repeat=2)) == [1e-3] * 4
    assert events == [*estimate, "run 0 2", "run 0 4"]


def test_budgets_count_the_host_time_of_a_launch_not_only_what_it_reports() -> None:
    # GPU timestamps report the kernel alone; each launch also waits for
    # its submission and read-back (2 ms against 0.07 on an H100).
    launches = []

    def run(warmup: int, repeat: int) -> list[float]:
        launches.append(warmup + repeat)
        time.sleep(1e-3 * (warmup + repeat))
        return [1e-6] * repeat

    samples = measure(run, Budget(warmup=0.01, rep=0.02))
    # At 1 ms a launch or more: at most 10 warm-up launches and 20 timed
    # (the kernel's 1 µs would have asked for 10,000 and 10,000).
    assert 5 <= len(samples) <= 20
    assert sum(launches) <= 4 + 3 + 10 + 20


def test_interleave_rotates_the_order_and_splits_the_budget_in_chunks() -> None:
    order: list[str] = []

    def sampler(name: str, seconds: float) -> Any:
        def run(warmup: int, repeat: int) -> list[float]:
            order.append(f"{name} {warmup} {repeat}")
            return [seconds] * repeat

        return run

    got = interleave({"a": sampler("a", 1e-3), "b": sampler("b", 2e-3)}, Budget(0, 0.012), rounds=2)
    assert len(got["a"]) == 12 and len(got["b"]) == 6
    # estimate each (no further warm-up in a budget of 0 s), then chunks:
    # a b, then b a
    assert order == ["a 1 3", "a 0 3", "b 1 3", "b 0 3", "a 0 6", "b 0 3", "b 0 3", "a 0 6"]
    assert Budget(warmup=0.1, rep=0.5).counts(0.01) == (10, 50)
    assert Budget(rep=1.0, max_repeat=100).counts(1e-9) == (1_000_000, 100)


def test_interleave_settles_before_each_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(tf.timing.time, "sleep", lambda s: events.append(f"sleep {s}"))

    def sampler(name: str) -> Any:
        def run(warmup: int, repeat: int) -> list[float]:
            events.append(name)
            return [1e-3] * repeat

        return run

    interleave({"a": sampler("a"), "b": sampler("b")}, Budget(0, 0.004), rounds=2, settle=0.2)
    # The estimates and warm-ups first, then a pause before every chunk.
    chunks = ["sleep 0.2", "a", "sleep 0.2", "b", "sleep 0.2", "b", "sleep 0.2", "a"]
    assert events == ["a", "a", "b", "b", *chunks]


@pytest.mark.parametrize("name", ["softmax", "matmul"])
def test_exported_kernels_run_unchanged_through_wgpu_py(
    name: str, gpu: tf.Device, tmp_path: Path
) -> None:
    sizes = {"rows": 9, "cols": 200} if name == "softmax" else {"m": 40, "n": 24, "k": 16}
    w = tf.workloads.get(name, **sizes, **({"epilogue": "bias_gelu"} if name == "matmul" else {}))
    kernel = tf.Engine(gpu).lower(w)
    assert isinstance(kernel, tf.Kernel)
    manifest = kernel.export(tmp_path / "out", name)
    assert sorted(p.name for p in manifest.parent.iterdir()) == [f"{name}.json", f"{name}.wgsl"]
    spec = json.loads(manifest.read_text())
    assert spec["fusion"] == w.payload.fingerprint and spec["dispatch"] == kernel.dispatch
    assert spec["features"] == (["subgroups"] if "subgroupShuffleXor(" in kernel.wgsl else [])
    (got,) = run_exported_with_wgpu_py(manifest, *w.inputs())
    assert_close(got, w.expected()[0], rtol=1e-4)
    with pytest.raises(ValueError, match="name must be an identifier"):
        kernel.export(tmp_path, "../k")
