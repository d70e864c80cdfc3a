"""Hand schedules from Python: a matrix of fusions and schedules on the CPU
and the GPU against numpy, primitive errors, traces, and kernels run by
another WebGPU host (wgpu-py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilefuse as tf
from conftest import assert_close, from_schema, run_exported_with_wgpu_py, schedule_or_reject

f32 = np.float32
Builder = Callable[[np.random.Generator], tuple[tf.Fusion, list[np.ndarray[Any, Any]], list[Any]]]


def pointwise(rng: np.random.Generator) -> Any:
    f = tf.Fusion()
    a = f.input((37, 70), "f32", name="a")
    b = f.input((70,), "f32", name="b")
    y = (a * b + 1.0).tanh() * 0.5 + (-a).exp()
    y.name = "y"
    f.output(y)
    xa, xb = rng.standard_normal((37, 70)).astype(f32), rng.standard_normal(70).astype(f32)
    a64, b64 = xa.astype(np.float64), xb.astype(np.float64)
    return f, [xa, xb], [np.tanh(a64 * b64 + 1) * 0.5 + np.exp(-a64)]


def inner_reduction(rng: np.random.Generator) -> Any:
    f = tf.Fusion()
    x = f.input((19, 300), "f32", name="x")
    s = x.sum(axis=1)
    s.name = "s"
    f.output(s)
    a = rng.standard_normal((19, 300)).astype(f32)
    return f, [a], [a.astype(np.float64).sum(axis=1)]


def outer_reduction(rng: np.random.Generator) -> Any:
    f = tf.Fusion()
    x = f.input((300, 19), "f32", name="x")
    s = x.max(axis=0)
    s.name = "s"
    f.output(s)
    a = rng.standard_normal((300, 19)).astype(f32)
    return f, [a], [a.astype(np.float64).max(axis=0)]


def softmax(rng: np.random.Generator) -> Any:
    f = tf.Fusion()
    x = f.input((24, 500), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    e.name = "e"
    y = e / e.sum(axis=1, keepdims=True)
    y.name = "y"
    f.output(y)
    a = rng.standard_normal((24, 500)).astype(f32)
    r = np.exp(a.astype(np.float64) - a.max(axis=1, keepdims=True))
    return f, [a], [r / r.sum(axis=1, keepdims=True)]


def layernorm(rng: np.random.Generator) -> Any:
    f = tf.Fusion()
    x = f.input((16, 256), "f32", name="x")
    mu = x.mean(axis=1, keepdims=True)
    c = x - mu
    y = c * ((c * c).mean(axis=1, keepdims=True) + 1e-5).rsqrt()
    y.name = "y"
    f.output(y)
    a = rng.standard_normal((16, 256)).astype(f32)
    a64 = a.astype(np.float64)
    c64 = a64 - a64.mean(axis=1, keepdims=True)
    return f, [a], [c64 / np.sqrt((c64**2).mean(axis=1, keepdims=True) + 1e-5)]


def matmul_epilogue(rng: np.random.Generator) -> Any:
    f = tf.Fusion()
    a = f.input((24, 32), "f32", name="a")
    b = f.input((32, 20), "f32", name="b")
    bias = f.input((20,), "f32", name="bias")
    y = (a @ b + bias).relu()
    y.name = "y"
    f.output(y)
    xa = rng.standard_normal((24, 32)).astype(f32)
    xb = rng.standard_normal((32, 20)).astype(f32)
    xc = rng.standard_normal(20).astype(f32)
    return f, [xa, xb, xc], [np.maximum(xa.astype(np.float64) @ xb + xc, 0)]


FUSIONS: dict[str, Builder] = {
    "pointwise": pointwise,
    "inner_reduction": inner_reduction,
    "outer_reduction": outer_reduction,
    "softmax": softmax,
    "layernorm": layernorm,
    "matmul_epilogue": matmul_epilogue,
}


def inline_all(s: tf.Schedule) -> None:
    s.compute_inline_all()


def split_bind(s: tf.Schedule) -> None:
    """Outermost loop → workgroups, innermost spatial loop split by 64 →
    invocations (reduce loops stay serial inside)."""
    inline_all(s)
    for b in s.get_blocks():
        loops = s.get_loops(b)
        spatial = [lp for lp in loops if _spatial(s, b, lp)]
        if not spatial:
            continue
        outer, inner = (spatial[0], spatial[-1]) if len(spatial) > 1 else (None, spatial[0])
        _, ji = s.split(inner, [None, 64])
        s.bind(ji, "invocation.x")
        if outer is not None:
            s.bind(outer, "workgroup.x")


def _spatial(s: tf.Schedule, b: tf.Block, loop: tf.Loop) -> bool:
    # A loop is spatial if parallelizing it would not race: probe a copy.
    probe = tf.Schedule.replay(s.fusion, s.trace)
    try:
        probe.parallel(tf.Loop(probe, loop.id))
    except tf.ScheduleError:
        return False
    return True


def vectorize_unroll(s: tf.Schedule) -> None:
    for b in s.get_blocks():
        loops = s.get_loops(b)
        last = loops[-1]
        reduce = not _spatial(s, b, last)
        _, inner = s.split(last, [None, 4])
        if reduce:
            s.unroll(inner)
        else:
            s.vectorize(inner)


def rfactor_bind(s: tf.Schedule) -> None:
    """Each reduction: the innermost loop (a reduce loop) split by 16, the
    inner part rfactored and bound to invocations."""
    inline_all(s)
    for b in s.get_blocks():
        loops = s.get_loops(b)
        if _spatial(s, b, loops[-1]):
            continue
        ko, ki = s.split(loops[-1], [None, 16])
        rf = s.rfactor(ki)
        s.reorder(ki, ko)
        s.bind(ki, "invocation.x")
        outer = s.get_loops(rf)[0]
        if outer != ki:
            s.bind(outer, "workgroup.x")


def rows(s: tf.Schedule) -> tf.Loop | None:
    """Everything computed per row of the output: the row loop, if any."""
    inline_all(s)
    *producers, out = s.get_blocks()
    row = s.get_loops(out)[0]
    if not _spatial(s, out, row):
        return None
    for p in reversed(producers):
        s.compute_at(p, row)
    return row


def compute_at_rows(s: tf.Schedule) -> None:
    """Everything computed per row of the output, rows on workgroups."""
    row = rows(s)
    if row is not None:
        s.bind(row, "workgroup.x")


def stage_first_input(s: tf.Schedule, row: tf.Loop) -> None:
    """The first block under ``row`` reads its first input through
    workgroup memory, loaded by 32 invocations."""
    copy = s.cache_read(s.get_blocks()[0], s.fusion.inputs[0].name or "", "workgroup")
    s.compute_at(copy, row)
    _, inner = s.split(s.get_loops(copy)[-1], [None, 32])
    s.bind(inner, "invocation.x")


def workgroup_staging(s: tf.Schedule) -> None:
    """Rows per workgroup, their first input staged in workgroup memory."""
    row = rows(s)
    if row is not None:
        s.bind(row, "workgroup.x")
        stage_first_input(s, row)


def pipelined_staging(s: tf.Schedule) -> None:
    """Rows in order in one workgroup, their first input staged in three
    rotating workgroup buffers, each row's copy one row ahead."""
    row = rows(s)
    if row is not None:
        stage_first_input(s, row)
        s.pipeline(row, stages=3, prefetch_gap=1)
        assert row.kind == "pipelined: 3 stages, copies 1 ahead"


SCHEDULES: dict[str, Callable[[tf.Schedule], None]] = {
    "workgroup staging": workgroup_staging,
    "pipelined staging": pipelined_staging,
    "rfactor+bind": rfactor_bind,
    "compute_at rows": compute_at_rows,
    "initial": lambda s: None,
    "inline": inline_all,
    "split+bind": split_bind,
    "vectorize+unroll": vectorize_unroll,
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_schedules_match_numpy(
    fusion: str, schedule: str, device: tf.Device, rng: np.random.Generator
) -> None:
    f, inputs, expected = FUSIONS[fusion](rng)
    s = f.create_schedule()
    SCHEDULES[schedule](s)
    k = s.build(device)
    out = k(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    for got, want in zip(outs, expected, strict=True):
        assert_close(got, want)


def test_issue_example(device: tf.Device, rng: np.random.Generator) -> None:
    f, (x,), (want,) = softmax(rng)
    s = f.create_schedule()
    b = s.get_block("e")
    i, j = s.get_loops(b)
    jo, ji = s.split(j, [None, 256], names=["jo", "ji"])
    s.bind(i, "workgroup.x")
    s.bind(ji, "invocation.x")
    assert "for jo in range(2):" in str(s) and "# invocation.x" in str(s)
    assert (jo.name, jo.extent, ji.kind) == ("jo", 2, "invocation.x")
    k = s.build(device)
    assert_close(k(x), want)
    t = k.benchmark(x, warmup=1, repeat=3)
    assert len(t.samples) == 3 and 0 < t.min <= t.median <= t.max
    assert "@compute" in k.wgsl
    assert [d["entry_point"] for d in k.dispatch] == [f"stage{i}" for i in range(len(k.dispatch))]
    x_binding = next(b for b in k.bindings if b["name"] == "x")
    assert x_binding == {
        "binding": 0,
        "name": "x",
        "dtype": "f32",
        "storage": "f32",
        "shape": [24, 500],
        "access": "read",
        "role": "input",
        "index": 0,
    }


def test_trace_replay_reproduces_the_wgsl(rng: np.random.Generator) -> None:
    for name, build in FUSIONS.items():
        f, _, _ = build(rng)
        s = f.create_schedule()
        split_bind(s)
        again = tf.Schedule.replay(f, s.trace)
        cpu = tf.Device.cpu()
        assert again.build(cpu).wgsl == s.build(cpu).wgsl, name
        assert str(again) == str(s)


def test_a_block_factored_twice_gets_new_names_and_replays_by_them() -> None:
    """Found by the schedule fuzzer: a second rfactor of one block named its
    partials as the first had, so a trace that names them (``cache_write``
    of the second ``op_1_rf``) replayed onto the first."""
    f = tf.Fusion()
    x = f.input((1, 2), "f32")
    f.output(x.sum(axis=(0, 1)))
    s = f.create_schedule()
    i, j = s.get_loops("op_1")
    s.reorder(j, i)
    s.rfactor(j)
    second = s.rfactor(s.get_loops("op_1")[0])
    names = [str(b) for b in s.get_blocks()]
    assert len(set(names)) == len(names), names
    assert str(second) == "Block('op_1_rf1')"
    xs = np.random.default_rng(0).standard_normal((1, 2), dtype=np.float32)
    np.testing.assert_allclose(s.build(tf.Device.cpu())(xs), xs.sum(), rtol=1e-6)
    s.cache_write("op_1_rf1", "workgroup")
    again = tf.Schedule.replay(f, s.trace)
    assert str(again) == str(s)
    namespace = {"f": s.recorded_fusion}
    exec(s.trace_as_python(), namespace)
    assert str(namespace["s"]) == str(s)


def test_primitive_errors_name_the_problem(rng: np.random.Generator) -> None:
    f, _, _ = softmax(rng)
    s = f.create_schedule()
    m = s.get_block("op_1")
    i, j = s.get_loops(m)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: s.get_block("nope"), 'no block named "nope"'),
        (lambda: s.parallel(j), "parallel: loop i1 carries the reduction of block op_1"),
        (lambda: s.bind(j, "invocation.x"), "bind: loop i1 carries the reduction"),
        (lambda: s.bind(i, "warp.x"), 'bind: unknown thread axis "warp.x"'),
        (lambda: s.compute_inline(m), "compute_inline: block op_1 is a reduction"),
        (
            lambda: s.compute_inline("y"),
            "compute_inline: block y writes y, which is not an intermediate",
        ),
        (lambda: s.split(i, [None, None]), "split: at most one factor may be None"),
        (lambda: s.split(i, [-2, None]), "split: factors must be positive"),
        (lambda: s.split(i, [5]), "less than the extent 24"),
        (lambda: s.unroll(j), "unroll: loop i1 has 500 iterations; at most 256"),
        (lambda: s.vectorize(i), "vectorize: loop i0 is not innermost"),
        (lambda: s.pipeline(i, 1), "pipeline: stages must be between 2 and 8, got 1"),
        (lambda: s.pipeline(i), "pipeline: the body of loop i0 does not start with a copy"),
        (lambda: s.fuse(i), "fuse: needs at least two loops"),
        (lambda: s.rfactor(i), "rfactor: loop i0 must drive a reduce iterator"),
        (lambda: s.compute_at("y", i), "compute_at: no block under loop i0 reads block y"),
        (
            lambda: s.cache_read(m, "nope", "workgroup"),
            'cache_read: block op_1 does not read "nope"',
        ),
        (lambda: s.cache_read(m, "x", "shared"), 'unknown scope "shared"'),
    ]
    for call, message in cases:
        with pytest.raises(tf.ScheduleError, match=message):
            call()
    io, _ = s.split(i, [None, 4])
    with pytest.raises(tf.ScheduleError, match="loop i0 is no longer in the schedule"):
        s.split(i, [2, None])
    other = f.create_schedule()
    with pytest.raises(tf.ScheduleError, match="belongs to another schedule"):
        other.parallel(io)
    assert isinstance(tf.ScheduleError("x"), ValueError)
    with pytest.raises(
        tf.ScheduleError, match="unroll: loop: expected a Loop of this schedule, got int"
    ):
        s.unroll(0)  # type: ignore[arg-type]
    with pytest.raises(
        tf.ScheduleError, match="expected a Block of this schedule or a name, got int"
    ):
        s.get_loops(0)  # type: ignore[arg-type]


def test_reorder_takes_loops_or_a_list_of_them(rng: np.random.Generator) -> None:
    f, _, _ = softmax(rng)
    s, t = f.create_schedule(), f.create_schedule()
    (i, j), (k, m) = s.get_loops("y"), t.get_loops("y")
    s.reorder(j, i)
    t.reorder([m, k])
    assert str(s) == str(t)


def test_workgroup_buffer_must_be_placed(rng: np.random.Generator) -> None:
    f, _, _ = softmax(rng)
    s = f.create_schedule()
    s.cache_read("op_1", "x", "workgroup")  # not moved under a loop
    with pytest.raises(tf.ScheduleError, match=r"x_wg .* share no loop"):
        s.build(tf.Device.cpu())


def _exp_plus_one() -> tf.Fusion:
    f = tf.Fusion()
    x = f.input((8,), "f32", name="x")
    t1 = x.exp()
    t1.name = "t1"
    t2 = t1 + 1.0
    t2.name = "t2"
    f.output(t2)
    return f


def test_staging_never_reorders_a_read_before_its_write() -> None:
    """Each sequence below ran, on both devices, with a block reading a
    buffer before the block writing it (t2 read exp(x) as 0 + 1)."""
    s = _exp_plus_one().create_schedule()
    s.reverse_compute_at("t2", s.get_loops("t1")[0])
    # The copy back, after the nest, would come after t2 reads t1 (private:
    # inlining t1 into the copy made that buildable).
    for scope in ["private", "global"]:
        with pytest.raises(tf.ScheduleError, match="block t2 reads t1 inside block t1's loop nest"):
            s.cache_write("t1", scope)
    # A copy in global memory, before the nest, would read t1 unwritten.
    with pytest.raises(tf.ScheduleError, match="block t1 writes t1 inside block t2's loop nest"):
        s.cache_read("t2", "t1", "global")
    # A reduction's init would write the buffer while the update writes
    # the copy (a reused arena then summed every call's result).
    f = tf.Fusion()
    y = f.input((4, 8), "f32", name="x").sum(axis=1)
    y.name = "y"
    f.output(y)
    s = f.create_schedule()
    s.decompose_reduction("y", s.get_loops("y")[1])
    with pytest.raises(tf.ScheduleError, match="cache_write: block y shares its buffer y"):
        s.cache_write("y", "global")


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((0, 3, 1), (0, 2)), ((1, 3, 1), (0, 2)), ((0, 3), (0,)), ((2, 3, 4), (0, 2))],
)
def test_a_loop_fused_from_a_reduce_and_a_spatial_loop_starts_every_element(
    device: tf.Device, rng: np.random.Generator, shape: tuple[int, ...], axes: tuple[int, ...]
) -> None:
    """The fused loop drives a reduce iterator (its quotient) and the
    stored element (its remainder): each lane starts its own element. The
    CPU device started only lane 0's and summed the others into what the
    output held (found by tests/test_schedule_fuzz.py, seed 41)."""
    f = tf.Fusion()
    y = f.input(shape, "f32").sum(axis=axes)
    y.name = "y"
    f.output(y)
    s = f.create_schedule()
    reduce_loop, spatial_loop = s.get_loops("y")[:2]
    s.fuse(reduce_loop, spatial_loop)
    a = rng.standard_normal(shape).astype(np.float32)
    out = np.full(3, 7.0, np.float32)
    s.build(device)(a, out=out)
    assert_close(out, a.astype(np.float64).sum(axis=axes))


def test_kernels_of_one_wgsl_text_that_bind_different_buffers(device: tf.Device) -> None:
    """Loops that run zero times emit nothing of their blocks, so ``a + b``
    and ``a * a`` give one WGSL text that binds three buffers in one and two
    in the other. Pipelines were cached by the text alone: the second
    kernel got the first one's layout, and wgpu refused its bind group
    (found by tests/test_schedule_fuzz.py, seed 41)."""

    def build(op: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]) -> tf.Kernel:
        f = tf.Fusion()
        f.output(op(f.input((3, 0), "f32"), f.input((3, 0), "f32")))
        s = f.create_schedule()
        s.unroll(s.get_loops(s.get_blocks()[-1])[1])
        return s.build(device)

    kernels = [build(lambda a, b: a + b), build(lambda a, b: a * a)]
    assert kernels[0].wgsl == kernels[1].wgsl
    empty = np.zeros((3, 0), np.float32)
    for k in kernels:
        assert k(empty, empty).shape == (3, 0)


def test_a_kernel_says_what_it_takes_gives_and_runs_on() -> None:
    f = tf.Fusion()
    s, v = f.input((), "f32", name="s"), f.input((3,), "i32", name="v")
    f.output(s * 2, v + 1)
    k = f.schedule(device="cpu")
    shown = r"<Kernel \(s: f32\[\], v: i32\[3\]\) -> \(\w+: f32\[\], \w+: i32\[3\]\) on (.+), 2 "
    match = re.fullmatch(shown + "dispatches>", repr(k))
    assert match is not None and match[1] == k.device.info["name"], repr(k)


def test_device_info() -> None:
    info = tf.Device.cpu().info
    assert info["backend"] == "cpu" and info["cores"] >= 1 and info["simd_width"] >= 4
    assert set(info["limits"]) >= {"max_workgroup_size", "max_invocations_per_workgroup"}


def test_gpu_device_info_and_limits(gpu: tf.Device, rng: np.random.Generator) -> None:
    info = gpu.info
    assert info["backend"] != "cpu" and info["limits"]["max_invocations_per_workgroup"] >= 256
    f, _, _ = pointwise(rng)
    s = f.create_schedule()
    (i, j) = s.get_loops("y")
    s.bind(j, "invocation.x")
    s.bind(i, "invocation.y")  # 37 x 70 = 2590 invocations per workgroup
    with pytest.raises(tf.DeviceError, match="max_compute_invocations_per_workgroup"):
        s.build(gpu)


def test_llvmpipe_loop_limit_is_a_device_error(gpu: tf.Device, rng: np.random.Generator) -> None:
    limit = gpu.info["limits"]["max_loop_iterations_per_invocation"]
    assert (limit is not None) == ("llvmpipe" in gpu.info["name"])
    f = tf.Fusion()
    x = f.input((300, 300), "f32", name="x")
    f.output(x.sum())  # one invocation, 90300 loop iterations
    if limit is None:  # a driver without the cap runs it
        a = rng.standard_normal((300, 300)).astype(np.float32)
        assert_close(f.create_schedule().build(gpu)(a), a.astype(np.float64).sum())
        return
    with pytest.raises(tf.DeviceError, match="loop iterations, more than this driver"):
        f.create_schedule().build(gpu)


# --- interop: another WebGPU host runs k.wgsl with k.bindings / k.dispatch ---


@pytest.mark.parametrize("fusion", ["softmax", "matmul_epilogue"])
def test_wgpu_py_runs_the_exported_kernel(
    fusion: str, gpu: tf.Device, rng: np.random.Generator, tmp_path: Path
) -> None:
    f, inputs, expected = FUSIONS[fusion](rng)
    s = f.create_schedule()
    split_bind(s)
    kernel = s.build(tf.Device.cpu())  # WGSL and bindings do not depend on the device
    exported = run_exported_with_wgpu_py(kernel.export(tmp_path, fusion), *inputs)
    for got, want in zip(exported, expected, strict=True):
        assert_close(got, want)


# --- automatic scheduling ----------------------------------------------------


def test_pointwise_scheduler_end_to_end(device: tf.Device, rng: np.random.Generator) -> None:
    f, inputs, (want,) = pointwise(rng)
    assert f.schedulers()["pointwise"] is None
    p = f.heuristics(device=device)
    assert isinstance(p, tf.PointwiseParams)
    k = f.schedule(p, device)
    assert_close(k(*inputs), want)
    assert k.schedule is not None and "workgroup.x" in str(k.schedule)
    # Edit the params as a user would: by attribute and through a dict.
    p.break_point = 1
    p.unroll_factor_inner = 2
    d = p.to_dict()
    d["launch"]["workgroup_size"] = [32, 1, 1]
    q = tf.HeuristicParams.from_dict(d)
    assert_close(f.schedule(q, device)(*inputs), want)
    assert_close(f.execute(*inputs, device=device), want)


def test_scheduler_errors_name_the_field(rng: np.random.Generator) -> None:
    f, _, _ = pointwise(rng)  # 37 x 70, fused into one extent of 2590
    cpu = tf.Device.cpu()
    with pytest.raises(tf.ParamsError) as info:
        f.schedule(tf.PointwiseParams(vectorization_factor=4), cpu)
    assert info.value.path == "vectorization_factor"
    assert "does not divide the innermost extent 2590" in str(info.value)
    g, _, _ = softmax(rng)
    reasons = g.schedulers()
    assert "reduces" in (reasons["pointwise"] or "")
    with pytest.raises(tf.ParamsError, match=r"scheduler: .*reduces"):
        g.heuristics("pointwise", device=cpu)


def pointwise_params(device: tf.Device, base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Partial params drawn from the struct's JSON Schema, over the
    heuristic's defaults, with loop sizes kept small enough to run."""
    schema = tf.PointwiseParams.json_schema()
    small = {"type": "integer", "minimum": 1, "maximum": 4}
    fields = {
        "break_point": st.integers(0, 2),
        "split_block": st.booleans(),
        "split_grid_y_dim": st.booleans(),
        "flip_grid_binding": st.booleans(),
        "vectorization_factor": from_schema(schema, schema["properties"]["vectorization_factor"]),
        "unroll_factor_inner": from_schema(schema, small),
        "unroll_factor_outer": from_schema(schema, small),
        "launch": st.fixed_dictionaries(
            {},
            optional={
                "workgroup_size": st.lists(
                    st.sampled_from([1, 2, 8, 32, 64]), min_size=3, max_size=3
                ),
                "grid": st.none() | st.lists(st.integers(1, 6), min_size=3, max_size=3),
            },
        ),
    }
    return st.fixed_dictionaries({}, optional=fields).map(lambda d: {**base, **d})


@pytest.mark.parametrize("on", ["cpu", "gpu"])
def test_any_pointwise_params_run_right_or_name_the_field(
    on: str, request: pytest.FixtureRequest, rng: np.random.Generator
) -> None:
    device = tf.Device.cpu() if on == "cpu" else request.getfixturevalue("gpu")
    f = tf.Fusion()
    a = f.input((12, 24), "f32", name="a")
    b = f.input((24,), "f32", name="b")
    f.output((a * b + 1.0).tanh() * 0.5 + (-a).exp())
    xa, xb = rng.standard_normal((12, 24)).astype(f32), rng.standard_normal(24).astype(f32)
    want = np.tanh(xa.astype(np.float64) * xb + 1) * 0.5 + np.exp(-xa.astype(np.float64))
    base = f.heuristics(device=device).to_dict()
    outcomes = {"ran": 0, "rejected": 0}

    @settings(max_examples=40, deadline=None)
    @given(pointwise_params(device, base))
    def check(values: dict[str, Any]) -> None:
        kernel = schedule_or_reject(f, values, device, outcomes)
        if kernel is not None:
            assert_close(kernel(xa, xb), want)

    check()
    assert outcomes["ran"] >= 5, outcomes


def test_compute_inline_all_keeps_what_it_is_told(rng: np.random.Generator) -> None:
    f, inputs, (want,) = softmax(rng)
    s = f.create_schedule()
    inlined = s.compute_inline_all(keep=["e"])
    assert "e" not in inlined and inlined, inlined
    names = [b.name for b in s.get_blocks()]
    assert "e" in names and "y" in names  # kept, and the output stays
    assert len(json.loads(s.trace)) == len(inlined)  # one compute_inline each
    assert_close(s.build(tf.Device.cpu())(*inputs), want)


def test_the_cpu_runs_schedules_wgsl_cannot_express(gpu: tf.Device) -> None:
    # A workgroup loop below a loop with two children: no WGSL form (the
    # workgroups would have to synchronize), but a loop nest the CPU runs.
    f = tf.Fusion()
    x = f.input((8, 64), "f32", name="x")
    m = x.max(axis=1, keepdims=True)
    m.name = "m"
    y = x - m
    y.name = "y"
    f.output(y)
    s = f.create_schedule()
    i, j = s.get_loops("y")
    s.compute_at("m", i)
    s.bind(j, "workgroup.x")
    k = s.build(tf.Device.cpu())
    a = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_array_equal(k(a), f.evaluate(a))
    with pytest.raises(tf.ScheduleError, match="below a loop with several children"):
        _ = k.wgsl
    with pytest.raises(tf.ScheduleError, match="below a loop with several children") as err:
        s.build(gpu)
    assert err.value.lowering_pass == "verify_workgroup_spine"
    assert err.value.primitive is None
    # The CPU lowering has no WGSL-only pass, so nothing in it objects.
    assert [name for name, _ in s.lower(tf.Device.cpu())] == CPU_PASSES


CPU_PASSES = [
    "simplify_bindings",
    "realize_buffers",
    "software_pipeline",
    "split_fused_loops",
    "distribute_short_nests",
    "launch",
    "clip_guarded_loops",
]
WGSL_PASSES = [
    "fold_constants",
    "simplify_bindings",
    "realize_buffers",
    "software_pipeline",
    "verify_workgroup_spine",
    "vectorize",
    "launch",
    "cross_invocation",
    "place_barriers",
    "localize_indices",
]


def _row_sum_schedule() -> tf.Schedule:
    """exp then a row sum, its reduction split and cached in workgroup
    memory: every pass has something to do."""
    f = tf.Fusion()
    x = f.input((16, 64), "f32", name="x")
    y = x.exp().sum(axis=1)
    y.name = "y"
    f.output(y)
    return f.schedule(device=tf.Device.cpu()).schedule


def test_lower_lists_every_pass_with_the_ir_after_it(gpu: tf.Device) -> None:
    s = _row_sum_schedule()
    cpu_steps = s.lower(tf.Device.cpu())
    assert [name for name, _ in cpu_steps] == CPU_PASSES
    assert all("buffer x: f32[16, 64] global input(0)" in text for _, text in cpu_steps)
    assert "# stage0:" in cpu_steps[-1][1]
    gpu_steps = s.lower(gpu)
    assert [name for name, _ in gpu_steps] == WGSL_PASSES
    assert "workgroups of" in dict(gpu_steps)["launch"]


def test_precondition_errors_name_their_primitive() -> None:
    s = _row_sum_schedule()
    loop = s.get_loops("y")[-1]
    with pytest.raises(tf.ScheduleError) as err:
        s.fuse(loop, loop)
    assert err.value.primitive == "fuse"
    assert err.value.lowering_pass is None


def _exp_minus_row_max_schedule() -> tf.Schedule:
    f = tf.Fusion()
    x = f.input((4, 32), "f32", name="x")
    m = x.max(axis=1, keepdims=True)
    m.name = "m"
    y = (x - m).exp()
    y.name = "y"
    f.output(y)
    return f.create_schedule()


def _fails(primitive: str, fn: Callable[[], object]) -> tf.ScheduleError:
    with pytest.raises(tf.ScheduleError) as err:
        fn()
    assert err.value.primitive == primitive, err.value
    return err.value


def test_precondition_errors_carry_the_blocks_and_loops_at_fault() -> None:
    # TVM's schedule errors carry what failed as data; so do ours, so that a
    # tool (a tuner, a search over schedules) need not parse the message.
    s = _exp_minus_row_max_schedule()
    (i,) = s.get_loops("y")[:1]
    mi, mj = s.get_loops("m")
    names = lambda *loops: tuple(lp.name for lp in loops)  # noqa: E731
    err = _fails("compute_inline", lambda: s.compute_inline("m"))
    assert (err.blocks, err.loops) == (("m",), ())
    err = _fails("parallel", lambda: s.parallel(mj))
    assert (err.blocks, err.loops) == (("m",), names(mj))
    err = _fails("split", lambda: s.split(i, [1, 2]))
    assert (err.blocks, err.loops) == ((), names(i))
    err = _fails("fuse", lambda: s.fuse(i, mj))
    assert err.loops == names(i, mj)
    err = _fails("vectorize", lambda: s.vectorize(i))
    assert err.loops == names(i)
    err = _fails("compute_at", lambda: s.compute_at("y", mi))
    assert err.blocks == ("y",) and err.loops == names(mi)
    # Blocks and loops that are not there are named too.
    with pytest.raises(tf.ScheduleError) as missing:
        s.get_block("nope")
    assert (missing.value.primitive, missing.value.blocks) == (None, ("nope",))
    # An error raised from Python has them too, empty.
    with pytest.raises(tf.ScheduleError, match="another schedule") as other:
        s.parallel(_exp_minus_row_max_schedule().get_loops("y")[0])
    assert (other.value.primitive, other.value.blocks, other.value.loops) == (None, (), ())


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_a_build_lowers_once_and_dumps_each_pass(kind: str, request: pytest.FixtureRequest) -> None:
    # TILEFUSE_DUMP=lower prints every pass of every lowering: a build by
    # hand (no scheduler's limit check) shows each pass exactly once, and
    # a CPU build none of the WGSL-only ones.
    if kind == "gpu":
        request.getfixturevalue("gpu")  # fails in CI, skips elsewhere, without one
    script = (
        "import tilefuse as tf\n"
        "f = tf.Fusion()\n"
        "x = f.input((4, 32), 'f32')\n"
        "f.output(x.exp())\n"
        f"f.create_schedule().build(tf.Device.{kind}())\n"
    )
    env = {**os.environ, "TILEFUSE_DUMP": "lower"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stderr
    passes = [line[len("[lower] ") :] for line in out.splitlines() if line.startswith("[lower]")]
    assert passes == (CPU_PASSES if kind == "cpu" else WGSL_PASSES), out
    assert "(unchanged)" in out  # nothing to realize or pipeline here


def test_compute_inline_all_equals_inlining_one_by_one(rng: np.random.Generator) -> None:
    # compute_inline_all substitutes in one pass; replaying its trace
    # inlines block by block: the same nest and the same results.
    from test_schedulers import FAMILIES

    f = tf.Fusion()
    x = f.input((6, 10), "f32", name="x")
    a = (x * 2.0).tanh()  # read twice below: copied, not moved
    b = a + a.exp()
    f.output(b * (x - b.max(axis=1, keepdims=True)), a.sum(axis=0))
    fusions = [f] + [build(rng)[0] for build, _ in FAMILIES.values()]
    for fusion in fusions:
        s = fusion.create_schedule()
        keep = s.get_blocks()[1:2]
        s.compute_inline_all(keep=[b.name for b in keep])
        again = tf.Schedule.replay(fusion, s.trace)
        assert str(again) == str(s)
        k = s.build(tf.Device.cpu())
        inputs = [rng.standard_normal(i.shape).astype(np.float32) for i in fusion.inputs]
        for got, want in zip(_tuple(k(*inputs)), _tuple(fusion.evaluate(*inputs)), strict=True):
            assert_close(got, want)


def _tuple(x: Any) -> tuple[Any, ...]:
    return x if isinstance(x, tuple) else (x,)
