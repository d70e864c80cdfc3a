"""The reduction and matmul schedulers and segmentation, from Python: the
default heuristics of every fusion family against numpy on both devices,
params drawn at random from each struct's space (run right, or rejected
with the field's path), and seed 000's edit-and-schedule flow."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilefuse as tf
from conftest import assert_close, schedule_or_reject

f32 = np.float32
Arrays = list[np.ndarray[Any, Any]]
Case = tuple[tf.Fusion, Arrays, Any]


def _softmax64(x: Any, axis: int) -> Any:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax(rng: np.random.Generator, shape: tuple[int, ...] = (24, 500), axis: int = -1) -> Case:
    f = tf.Fusion()
    x = f.input(shape, "f32", name="x")
    e = (x - x.max(axis=axis, keepdims=True)).exp()
    f.output(e / e.sum(axis=axis, keepdims=True))
    a = rng.standard_normal(shape).astype(f32)
    return f, [a], _softmax64(a.astype(np.float64), axis)


def log_softmax(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    x = f.input((16, 300), "f32", name="x")
    d = x - x.max(axis=1, keepdims=True)
    f.output(d - d.exp().sum(axis=1, keepdims=True).log())
    a = rng.standard_normal((16, 300)).astype(f32)
    a64 = a.astype(np.float64)
    d64 = a64 - a64.max(axis=1, keepdims=True)
    return f, [a], d64 - np.log(np.exp(d64).sum(axis=1, keepdims=True))


def layernorm(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    x = f.input((20, 256), "f32", name="x")
    w = f.input((256,), "f32", name="w")
    b = f.input((256,), "f32", name="b")
    c = x - x.mean(axis=1, keepdims=True)
    f.output(c * ((c * c).mean(axis=1, keepdims=True) + 1e-5).rsqrt() * w + b)
    xa = rng.standard_normal((20, 256)).astype(f32)
    wa, ba = rng.standard_normal(256).astype(f32), rng.standard_normal(256).astype(f32)
    x64 = xa.astype(np.float64)
    c64 = x64 - x64.mean(axis=1, keepdims=True)
    y = c64 / np.sqrt((c64 * c64).mean(axis=1, keepdims=True) + 1e-5) * wa + ba
    return f, [xa, wa, ba], y


def rmsnorm(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    x = f.input((3, 7, 128), "f32", name="x")
    f.output(x * ((x * x).mean(axis=-1, keepdims=True) + 1e-6).rsqrt())
    a = rng.standard_normal((3, 7, 128)).astype(f32)
    a64 = a.astype(np.float64)
    return f, [a], a64 / np.sqrt((a64 * a64).mean(axis=-1, keepdims=True) + 1e-6)


def stats(rng: np.random.Generator) -> Case:
    """Several reductions, returned with a value derived from them."""
    f = tf.Fusion()
    x = f.input((33, 130), "f32", name="x")
    mu = x.mean(axis=1)
    f.output(mu, x.max(axis=1) - mu)
    a = rng.standard_normal((33, 130)).astype(f32)
    a64 = a.astype(np.float64)
    return f, [a], (a64.mean(axis=1), a64.max(axis=1) - a64.mean(axis=1))


def outer_sum(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    x = f.input((500, 24), "f32", name="x")
    f.output(x.sum(axis=0))
    a = rng.standard_normal((500, 24)).astype(f32)
    return f, [a], a.astype(np.float64).sum(axis=0)


def middle_max(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    x = f.input((6, 50, 10), "f32", name="x")
    f.output(x.max(axis=1))
    a = rng.standard_normal((6, 50, 10)).astype(f32)
    return f, [a], a.astype(np.float64).max(axis=1)


def linear_relu(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    a = f.input((40, 64), "f32", name="a")
    b = f.input((64, 48), "f32", name="b")
    bias = f.input((48,), "f32", name="bias")
    f.output(tf.relu(a @ b + bias))
    xa, xb = rng.standard_normal((40, 64)).astype(f32), rng.standard_normal((64, 48)).astype(f32)
    xbias = rng.standard_normal(48).astype(f32)
    return f, [xa, xb, xbias], np.maximum(xa.astype(np.float64) @ xb + xbias, 0)


def matmul_transposed(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    a = f.input((30, 20), "f32", name="a")
    b = f.input((44, 30), "f32", name="b")
    f.output(tf.matmul(a, b, transpose_a=True, transpose_b=True) * 0.5)
    xa, xb = rng.standard_normal((30, 20)).astype(f32), rng.standard_normal((44, 30)).astype(f32)
    return f, [xa, xb], (xa.astype(np.float64).T @ xb.astype(np.float64).T) * 0.5


def batched_gelu_residual(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    a = f.input((2, 16, 32), "f32", name="a")
    b = f.input((32, 24), "f32", name="b")
    r = f.input((2, 16, 24), "f32", name="r")
    f.output((a @ b).gelu() + r)
    xa = rng.standard_normal((2, 16, 32)).astype(f32)
    xb = rng.standard_normal((32, 24)).astype(f32)
    xr = rng.standard_normal((2, 16, 24)).astype(f32)
    z = xa.astype(np.float64) @ xb
    gelu = 0.5 * z * (1 + np.tanh(0.7978845608028654 * (z + 0.044715 * z**3)))
    return f, [xa, xb, xr], gelu + xr


def matmul_softmax(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    a = f.input((16, 24), "f32", name="a")
    b = f.input((24, 40), "f32", name="b")
    s = a @ b
    e = (s - s.max(axis=1, keepdims=True)).exp()
    f.output(e / e.sum(axis=1, keepdims=True))
    xa, xb = rng.standard_normal((16, 24)).astype(f32), rng.standard_normal((24, 40)).astype(f32)
    return f, [xa, xb], _softmax64(xa.astype(np.float64) @ xb, 1)


def rows_and_columns(rng: np.random.Generator) -> Case:
    f = tf.Fusion()
    x = f.input((12, 30), "f32", name="x")
    f.output(x.sum(axis=1), x.max(axis=0) * 2.0)
    a = rng.standard_normal((12, 30)).astype(f32)
    a64 = a.astype(np.float64)
    return f, [a], (a64.sum(axis=1), a64.max(axis=0) * 2)


def interleaved_axes(rng: np.random.Generator) -> Case:
    # Reduced and kept axes alternate, and the producer is an output too:
    # it is computed under rows fused from two kept axes.
    f = tf.Fusion()
    x = f.input((2, 3, 2, 4), "f32", name="x")
    y = -x
    f.output(y, y.sum(axis=(0, 2)))
    a = rng.standard_normal((2, 3, 2, 4)).astype(f32)
    return f, [a], (-a.astype(np.float64), -a.astype(np.float64).sum(axis=(0, 2)))


FAMILIES: dict[str, tuple[Callable[[np.random.Generator], Case], list[str]]] = {
    "softmax": (softmax, ["reduction"]),
    "softmax_outer": (lambda rng: softmax(rng, (60, 33), 0), ["reduction"]),
    "log_softmax": (log_softmax, ["reduction"]),
    "layernorm": (layernorm, ["reduction"]),
    "rmsnorm": (rmsnorm, ["reduction"]),
    "stats": (stats, ["reduction"]),
    "outer_sum": (outer_sum, ["reduction"]),
    "middle_max": (middle_max, ["reduction"]),
    "linear_relu": (linear_relu, ["matmul"]),
    "matmul_transposed": (matmul_transposed, ["matmul"]),
    "batched_gelu_residual": (batched_gelu_residual, ["matmul"]),
    "matmul_softmax": (matmul_softmax, ["matmul", "reduction"]),
    "rows_and_columns": (rows_and_columns, ["reduction", "reduction"]),
    "interleaved_axes": (interleaved_axes, ["reduction"]),
}


def check(got: Any, want: Any) -> None:
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            assert_close(g, w)
    else:
        assert_close(got, want)


@pytest.mark.parametrize("family", FAMILIES)
def test_default_heuristics_match_numpy(
    family: str, device: tf.Device, rng: np.random.Generator
) -> None:
    build, schedulers = FAMILIES[family]
    f, inputs, want = build(rng)
    assert [s.scheduler for s in f.segments()] == schedulers
    params = f.heuristics(device=device)
    if len(schedulers) == 1:
        assert isinstance(params, tf.HeuristicParams) and params.scheduler == schedulers[0]
    else:
        assert isinstance(params, list)
        assert [p.scheduler for p in params] == schedulers
    check(f.schedule(params, device)(*inputs), want)
    check(f.execute(*inputs, device=device), want)


def test_segments_show_what_crosses(rng: np.random.Generator) -> None:
    f, inputs, want = matmul_softmax(rng)
    first, second = f.segments()
    assert [t.name for t in first.inputs] == ["a", "b"]
    assert first.outputs[0].id == second.inputs[0].id
    assert second.outputs[0].id == f.outputs[0].id
    # Each segment is a fusion of its own, scheduled on its own.
    assert first.fusion.schedulers()["matmul"] is None
    cpu = tf.Device.cpu()
    params = f.heuristics(device=cpu)
    assert isinstance(params, list)
    with pytest.raises(tf.ParamsError, match="2 segments, got 1"):
        f.schedule(params[:1], cpu)
    kernel = f.schedule(params, cpu)
    assert isinstance(kernel, tf.SegmentedKernel) and len(kernel.kernels) == 2
    check(kernel(*inputs), want)
    assert kernel.benchmark(*inputs, warmup=1, repeat=3).median > 0


def test_seed_000_flow(device: tf.Device, rng: np.random.Generator) -> None:
    """MatmulParams from a nested dict, warp_tile changed by attribute,
    scheduled, run, correct."""
    f, inputs, want = linear_relu(rng)
    params = tf.MatmulParams.from_dict(
        {
            "tile_sizes": {
                "cta_tile": {"m": 32, "n": 32, "k": 16},
                "warp_tile": {"m": 16, "n": 32, "k": 16},
                "instruction_tile": {"m": 4, "n": 4, "k": 4},
            },
            "launch": {"workgroup_size": [8, 8, 1]},
        }
    )
    before = f.schedule(params, device)
    params.tile_sizes.warp_tile.m = 32
    params.tile_sizes.warp_tile = tf.GemmTile(m=32, n=16, k=8)
    after = f.schedule(params, device)
    assert isinstance(after, tf.Kernel) and isinstance(before, tf.Kernel)
    assert after.wgsl != before.wgsl
    assert_close(after(*inputs), want)
    with pytest.raises(tf.ParamsError) as info:
        params.tile_sizes.warp_tile.n = 5
    assert info.value.path == "tile_sizes.warp_tile.n"


# --- params drawn from each struct's space -----------------------------------

small = st.sampled_from([1, 2, 4])


def reduction_params(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    fields = {
        "persistent_kernel": st.booleans(),
        "project_persistent_buffers": st.booleans(),
        "flip_grid": st.booleans(),
        "schedule_3d": st.booleans(),
        "fastest_dim": st.booleans(),
        "cross_invocation_inner_reduction": st.booleans(),
        "cross_workgroup_inner_reduction": st.booleans(),
        "cross_invocation_outer_reduction": st.booleans(),
        "cross_workgroup_outer_reduction": st.booleans(),
        "subgroup_inner_reduction": st.booleans(),
        "subgroup_outer_reduction": st.booleans(),
        "compile": st.fixed_dictionaries({}, optional={"use_subgroups": st.booleans()}),
        "vectorization_factor_reduction": small,
        "vectorization_factor_iteration": small,
        "unroll_factor_reduction": small,
        "unroll_factor_iteration": small,
        "rows_per_workgroup": st.sampled_from([1, 2, 4, 8, 16, 32]),
        "reduction_invocations": st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
        "launch": st.fixed_dictionaries(
            {},
            optional={
                "workgroup_size": st.tuples(
                    st.sampled_from([1, 4, 16, 32, 64]), st.sampled_from([1, 2]), st.just(1)
                ).map(list),
                "grid": st.none() | st.lists(st.integers(1, 5), min_size=3, max_size=3),
            },
        ),
    }
    inner = base["fastest_dim"]

    def consistent(d: dict[str, Any]) -> dict[str, Any]:
        # Repair what the space cannot express: the reduction's kind, and
        # rows per workgroup a multiple of the row invocations' step.
        d["fastest_dim"] = inner
        other = "outer" if inner else "inner"
        d[f"cross_invocation_{other}_reduction"] = False
        d[f"cross_workgroup_{other}_reduction"] = False
        d[f"subgroup_{other}_reduction"] = False
        kind = "inner" if inner else "outer"
        d["compile"] = {**d["compile"], "use_subgroups": d[f"subgroup_{kind}_reduction"]}
        d["vectorization_factor_iteration" if inner else "vectorization_factor_reduction"] = 1
        wg = d["launch"]["workgroup_size"]
        d["rows_per_workgroup"] = (
            wg[0]
            * wg[1]
            * wg[2]
            * d["unroll_factor_iteration"]
            * d["vectorization_factor_iteration"]
        )
        return d

    drawn = st.fixed_dictionaries({}, optional=fields).map(lambda d: merge(base, d))
    return st.one_of(drawn, drawn.map(consistent), drawn.map(consistent))


def gemm_tile(sizes: list[int]) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries({d: st.sampled_from(sizes) for d in "mnk"})


def matmul_params(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    tiles = st.fixed_dictionaries(
        {},
        optional={
            "cta_tile": gemm_tile([8, 16, 32]),
            "warp_tile": gemm_tile([4, 8, 16]),
            "instruction_tile": gemm_tile([1, 2, 4]),
        },
    )
    fields = {
        "tile_sizes": tiles,
        "async_gmem_load_operands": st.booleans(),
        "splitk_factor": st.sampled_from([1, 2, 3, 4]),
        "cta_order": st.sampled_from(["row_major", "column_major"]),
        "grid_swizzle_factor": st.sampled_from([1, 2, 3]),
        "use_smem_epilogue": st.booleans(),
        "circular_buffer_options": st.fixed_dictionaries(
            {},
            optional={
                "smem_write": st.booleans(),
                "smem_read": st.booleans(),
                "stages": st.sampled_from([1, 2, 3, 4]),
                "prefetch_gap": st.sampled_from([0, 1, 2, 3]),
            },
        ),
        "tiling_strategy": st.sampled_from(
            ["one_tile_per_workgroup", "distribute_tiles_across_workgroups"]
        ),
        "supported_vec_size": st.fixed_dictionaries(
            {}, optional={k: st.sampled_from([1, 2, 4]) for k in ("a", "b", "epilogue")}
        ),
    }

    def fit_launch(d: dict[str, Any]) -> dict[str, Any]:
        # Usually give the workgroup the invocations the tiles need, so
        # most draws are accepted; sometimes keep the base's.
        t = d["tile_sizes"]
        cta, inst = t["cta_tile"], t["instruction_tile"]
        if cta["n"] % inst["n"] == 0 and cta["m"] % inst["m"] == 0:
            d["launch"]["workgroup_size"] = [cta["n"] // inst["n"], cta["m"] // inst["m"], 1]
        return d

    drawn = st.fixed_dictionaries({}, optional=fields).map(lambda d: merge(base, d))
    return st.one_of(drawn, drawn.map(fit_launch), drawn.map(fit_launch))


def merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in change.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


SPACES: dict[str, tuple[Callable[[np.random.Generator], Case], Any]] = {
    "reduction-inner": (layernorm, reduction_params),
    "reduction-outer": (lambda rng: softmax(rng, (60, 32), 0), reduction_params),
    "matmul": (linear_relu, matmul_params),
}


@pytest.mark.parametrize("space", SPACES)
def test_any_params_run_right_or_name_the_field(
    space: str, device: tf.Device, rng: np.random.Generator
) -> None:
    build, strategy = SPACES[space]
    f, inputs, want = build(rng)
    base = f.heuristics(device=device)
    assert isinstance(base, tf.HeuristicParams)
    outcomes = {"ran": 0, "rejected": 0}

    @settings(max_examples=20 if device.is_gpu else 30, deadline=None)
    @given(strategy(base.to_dict()))
    def run(values: dict[str, Any]) -> None:
        kernel = schedule_or_reject(f, values, device, outcomes)
        if kernel is not None:
            check(kernel(*inputs), want)

    run()
    assert outcomes["ran"] >= 3, outcomes


def test_schedule_without_params_takes_the_devices_heuristics(device: tf.Device) -> None:
    f, inputs, want = softmax(np.random.default_rng(2))
    k = f.schedule(device=device)
    assert isinstance(k, tf.Kernel) and k.device is device
    assert k.schedule is not None
    again = f.schedule(f.heuristics(device=device), device)
    assert again.schedule is not None and k.schedule.trace == again.schedule.trace
    check(k(*inputs), want)


def _with(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``values`` with the field at the dotted ``path`` set."""
    out = json.loads(json.dumps(values))
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


@pytest.mark.parametrize("family", ["softmax", "outer_sum", "linear_relu"])
def test_every_tunable_value_runs_right_or_is_rejected(
    family: str, device: tf.Device, rng: np.random.Generator
) -> None:
    # What a tuner tries: each declared field, each value of its domain
    # (its smallest and largest unless TILEFUSE_TUNABLE_VALUES=all: every
    # lavapipe matmul compiles for ~2 s), on the default params. Every
    # kernel that builds matches numpy.
    build, (scheduler,) = FAMILIES[family]
    f, inputs, want = build(rng)
    name, fields = f.tunables(device=device)
    assert name == scheduler and fields
    base = cast(tf.HeuristicParams, f.heuristics(device=device)).to_dict()
    outcomes = {"ran": 0, "rejected": 0}
    for field in fields:
        values = field["values"]
        assert values, field
        if os.environ.get("TILEFUSE_TUNABLE_VALUES") != "all":
            values = [values[0], values[-1]]
        for value in values:
            kernel = schedule_or_reject(f, _with(base, field["path"], value), device, outcomes)
            if kernel is not None:
                check(kernel(*inputs), want)
    assert outcomes["ran"] > len(fields), outcomes


@pytest.mark.parametrize("family", FAMILIES)
def test_trace_as_python_rebuilds_the_schedule(
    family: str, device: tf.Device, rng: np.random.Generator
) -> None:
    # Each scheduler's schedule, printed as Python and run on the fusion it
    # was recorded on, is the same schedule: the same loop nest and trace.
    build, _ = FAMILIES[family]
    f, _, _ = build(rng)
    for seg in f.segments():
        s = seg.fusion.schedule(device=device).schedule
        script = s.trace_as_python()
        namespace: dict[str, Any] = {"f": s.recorded_fusion}
        exec(script, namespace)
        again = namespace["s"]
        assert str(again) == str(s), script
        assert again.trace == s.trace


def test_ops_no_output_uses_leave_the_scheduler_alone(device: tf.Device) -> None:
    # A dead reduction over other axes: one scheduler still takes the rest.
    f = tf.Fusion()
    x = f.input((3, 4), "f32", name="x")
    x.sum(axis=0)
    f.output(x.sum())
    assert f.tunables(device=device)[0] == "reduction"
    assert [s.scheduler for s in f.segments()] == ["reduction"]
    p = f.heuristics(device=device)
    assert isinstance(p, tf.ReductionParams)
    a = np.random.default_rng(1).standard_normal((3, 4)).astype(f32)
    assert_close(f.schedule(p, device)(a), a.astype(np.float64).sum())


def test_a_dead_op_does_not_split_a_matmul_from_its_epilogue() -> None:
    f = tf.Fusion()
    a, b = f.input((4, 3), "f32"), f.input((3, 5), "f32")
    product = a @ b
    -product  # noqa: B018 (dead: no output uses it)
    f.output(product * 2.0)
    assert [s.scheduler for s in f.segments()] == ["matmul"]
    assert isinstance(f.heuristics(device="cpu"), tf.MatmulParams)


@pytest.mark.parametrize(
    "shape, build",
    [
        ((300, 700), lambda a, bt: a + bt),  # rows longer than a tile, ragged
        ((2048, 64), lambda a, bt: bt * 2.0 + 1.0),  # rows a power of two apart
        ((3, 260, 90), lambda a, bt: a + bt),  # one transpose a matrix
        ((1, 5000), lambda a, bt: a - bt),  # one row: no whole rows to gather
    ],
)
def test_transposed_reads_of_long_rows(
    shape: tuple[int, ...], build: Any, device: tf.Device, rng: np.random.Generator
) -> None:
    """An operand read transposed (the CPU gathers it a block of columns
    at a time over runs of whole rows), from any row to any row."""
    swapped = (*shape[:-2], shape[-1], shape[-2])
    axes = (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2)
    f = tf.Fusion()
    a = f.input(swapped, "f32", name="a")
    b = f.input(shape, "f32", name="b")
    f.output(build(a, b.permute(axes)))
    xa = rng.standard_normal(swapped).astype(np.float32)
    xb = rng.standard_normal(shape).astype(np.float32)
    want = build(xa.astype(np.float64), xb.astype(np.float64).transpose(axes))
    check(f.schedule(f.heuristics(device=device, cache=False), device)(xa, xb), want)


@pytest.mark.parametrize(
    "shape, break_point, lanes",
    [
        ((8, 16, 128, 64), 2, 64),  # attention-shaped: rows of the two last axes
        ((64, 1000, 3), 1, 3),
        ((4, 8, 4096), 2, 1024),  # a long last axis: rows of it alone
        ((300, 700), 1, 700),  # 2-D: rows of the last axis
    ],
)
def test_cpu_pointwise_rows_span_the_two_last_axes_when_the_last_is_short(
    shape: tuple[int, ...], break_point: int, lanes: int
) -> None:
    """The CPU default keeps the leading axes' fused loop to three axes at
    most where the last is short: a row of the last axis alone was a lane
    step of its own (`benches/reductions.py`)."""
    f = tf.Fusion()
    f.output(f.input(shape, "f32") * 2.0)
    p = f.heuristics(device="cpu", cache=False)
    assert isinstance(p, tf.PointwiseParams)
    assert (p.break_point, p.launch.workgroup_size) == (break_point, (lanes, 1, 1))


@pytest.mark.parametrize(
    "shape, rows",
    [
        ((64, 16, 16, 64), 16),  # rows within one run of the axis before the reduced one
        ((256, 100, 64), 100),
        ((32768, 128), 256),  # one axis of rows: as many as fit
        ((32000, 3, 64), 512),  # runs of 3, fewer than 8 rows: left alone
    ],
)
def test_cpu_row_reductions_keep_a_workgroup_within_one_run_of_rows(
    shape: tuple[int, ...], rows: int, rng: np.random.Generator
) -> None:
    """A CPU workgroup's rows across runs of the last axis before the
    reduced one ran a row at a time (`benches/reductions.py`).
    The shapes have rows enough for four workgroups a thread, the
    heuristic's other bound, on up to 32 threads; larger machines get more
    of the first axis (a 16-core host gave 10 rows of 16 x 100 x 64)."""
    threads = tf.Device.cpu().info["cores"]
    shape = (shape[0] * -(-threads // 32), *shape[1:])
    f = tf.Fusion()
    f.output(f.input(shape, "f32").sum(axis=-1))
    p = f.heuristics(device="cpu", cache=False)
    assert isinstance(p, tf.ReductionParams)
    assert p.launch.workgroup_size == (rows, 1, 1)
    x = rng.standard_normal(shape).astype(np.float32)
    check(f.schedule(p, "cpu")(x), x.astype(np.float64).sum(axis=-1))


@pytest.mark.parametrize(
    "rows, cols, row_by_row",
    [
        (256, 1024, False),  # 2^18 elements: nest by nest, from cache
        (1024, 2048, True),  # rows over 512 from 2^21 elements on
        (4096, 512, False),  # rows of 512 below 2^23 elements
        (16384, 512, True),
        (64, 4096, True),  # rows over 2048 at every size
        (4096, 256, True),  # short rows: one nest of many rows a workgroup
    ],
)
def test_cpu_softmax_runs_row_by_row_where_the_input_outgrows_the_cache(
    rows: int, cols: int, row_by_row: bool, rng: np.random.Generator
) -> None:
    """The CPU default runs a softmax's nests row by row (the next row
    prefetched) or nest by nest over all rows, as `benches/ab_builds.py`
    times them, and both give the softmax."""
    f = tf.Fusion()
    x = f.input((rows, cols), "f32")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    f.output(e / e.sum(axis=1, keepdims=True))
    p = f.heuristics(device="cpu", cache=False)
    assert isinstance(p, tf.ReductionParams)
    assert p.persistent_kernel == row_by_row
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    want = np.exp(a - a.max(axis=1, keepdims=True).astype(np.float64))
    check(f.schedule(p, "cpu")(a), want / want.sum(axis=1, keepdims=True))
