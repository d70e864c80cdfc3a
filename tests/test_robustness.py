"""Bad input never crashes, hangs or lies: one test per failure class that
fuzzing and a newcomer found (issue 11). The property test that keeps new
classes out is ``test_fuzz.py``; the semantics tested here are written
down in ``docs/semantics.md``."""

from __future__ import annotations

import copy
import json
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

import tilefuse as tf
from conftest import assert_close, in_ci, preserves_nan

CPU = tf.Device.cpu()


def chain_fusion(shape: tuple[int, ...] = (64,)) -> tf.Fusion:
    f = tf.Fusion()
    x = f.input(shape, "f32", name="x")
    f.output((x + 1.0).exp())
    return f


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- crashes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "path"),
    [
        (lambda: (d := {}, d.__setitem__("launch", d))[0], "launch.launch"),
        (lambda: {"launch": {"workgroup_size": (lst := [], lst.append(lst))[0]}}, "launch"),
    ],
)
def test_cyclic_params_are_a_params_error(make: Callable[[], Any], path: str) -> None:
    with pytest.raises(tf.ParamsError, match="nested deeper than") as err:
        tf.PointwiseParams.from_dict(make())
    assert err.value.path.startswith(path)


def test_deep_params_are_a_params_error() -> None:
    d: dict[str, Any] = {}
    for _ in range(100_000):
        d = {"a": d}
    with pytest.raises(tf.ParamsError, match="nested deeper than"):
        tf.HeuristicParams.from_dict(d)


def test_allocations_the_allocator_refuses_are_memory_errors() -> None:
    # 8 GB under a 3 GB address-space limit: evaluate and the CPU kernel
    # raise MemoryError naming the bytes instead of aborting the process.
    result = run_python(
        """
        import resource, numpy as np, tilefuse as tf
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        f = tf.Fusion(); x = f.input((1,), "f32")
        f.output(x.broadcast_to((2**31,)) + 1.0)
        k = f.schedule(f.heuristics(device=tf.Device.cpu()), tf.Device.cpu())
        for call in (lambda: f.evaluate(np.ones(1, np.float32)), lambda: k(np.ones(1, np.float32))):
            try:
                call()
            except MemoryError as e:
                print("MemoryError", e)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("MemoryError") == 2, result.stdout
    assert "8589934592 bytes" in result.stdout


# --- panics -------------------------------------------------------------------


def test_internal_errors_are_tilefuse_errors() -> None:
    assert issubclass(tf.InternalError, tf.TilefuseError)
    assert issubclass(tf.InternalError, RuntimeError)


@pytest.mark.parametrize("where", ["evaluate", "cpu", "gpu"])
def test_bool_bytes_other_than_0_and_1_are_true(where: str, request: pytest.FixtureRequest) -> None:
    f = tf.Fusion()
    x = f.input((4,), "bool")
    f.output(x.astype("f32"))
    a = np.array([1, 0, 2, 255], np.uint8).view(bool)
    if where == "evaluate":
        got = f.evaluate(a)
    else:
        device = CPU if where == "cpu" else request.getfixturevalue("gpu")
        got = f.execute(a, device=device)
    np.testing.assert_array_equal(got, [1, 0, 1, 1])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"repeat": 2**63}, "out of range"),
        ({"warmup": 2**64 - 1}, "out of range"),
        ({"warmup": -1}, "must not be negative"),
        ({"repeat": 0}, "repeat must be from 1"),
        ({"repeat": 10**9}, "repeat must be from 1"),
    ],
)
def test_bad_benchmark_counts_are_value_errors(kwargs: dict[str, int], error: str) -> None:
    f = chain_fusion()
    k = f.schedule(f.heuristics(device=CPU), CPU)
    with pytest.raises(ValueError, match=error):
        k.benchmark(np.ones(64, np.float32), **kwargs)


@pytest.mark.parametrize(
    ("factors", "error"),
    [
        ([2**32, 2**32, 2**32], "overflow a 64-bit"),
        ([None, 2**31], "more than 65536 times the extent"),
        ([2**64], "out of range"),
        ([2**20, 2**20], "more than 65536 times the extent"),
    ],
)
def test_split_factors_are_bounded(factors: list[int | None], error: str) -> None:
    s = chain_fusion().create_schedule()
    (i,) = s.get_loops(s.get_blocks()[-1])
    with pytest.raises(tf.ScheduleError, match=error):
        s.split(i, factors)


def test_a_replayed_trace_with_a_huge_factor_is_rejected() -> None:
    f = chain_fusion()
    s = f.create_schedule()
    (i,) = s.get_loops(s.get_blocks()[-1])
    s.split(i, [None, 4])
    steps = json.loads(s.trace)
    steps[0]["factors"] = [None, 2**63]
    trace = json.dumps(steps)
    with pytest.raises(tf.ScheduleError, match="more than 65536 times"):
        tf.Schedule.replay(f, trace)


# --- hangs --------------------------------------------------------------------


@pytest.mark.parametrize("order", [("j", "i"), ("i", "j")])
def test_workgroup_loops_must_enclose_invocation_loops(order: tuple[str, str]) -> None:
    f = tf.Fusion()
    a, b = f.input((3, 16), "f32"), f.input((16, 8), "f32")
    y = a @ b
    y.name = "y"
    f.output(y)
    s = f.create_schedule()
    loops = dict(zip("ijk", s.get_loops("y"), strict=True))
    axes = {"j": "workgroup.z", "i": "invocation.x"}
    first, second = order
    s.bind(loops[first], axes[first])
    with pytest.raises(tf.ScheduleError, match="workgroup loops must enclose"):
        s.bind(loops[second], axes[second])


def test_nested_unrolled_loops_are_bounded_on_the_gpu(
    gpu: tf.Device, rng: np.random.Generator
) -> None:
    # Two unrolled loops of 128 and 64 copy the block out 8192 times: the
    # shader compiler took minutes over such modules (a CI run timed out).
    f = tf.Fusion()
    x = f.input((128, 64), "f32", name="x")
    y = x.exp()
    y.name = "y"
    f.output(y)
    s = f.create_schedule()
    for loop in s.get_loops("y"):
        s.unroll(loop)
    with pytest.raises(tf.DeviceError, match=r"copy out 8192 blocks.*unroll fewer"):
        s.build(gpu)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    assert_close(s.build(CPU)(a), np.exp(a.astype(np.float64)))


@pytest.mark.parametrize(
    "call",
    [
        "k.benchmark(x, repeat=10**7)",
        "f.evaluate(x)",
        "k(x)",
    ],
)
def test_ctrl_c_interrupts_native_work(call: str) -> None:
    # Each call takes minutes; SIGINT a second in must end it at once.
    code = f"""
        import signal, sys, time, numpy as np, tilefuse as tf
        # As in a terminal, also when the suite runs as a background job.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        f = tf.Fusion(); x = f.input((2**26,), "f32"); y = x
        # evaluate keeps every value (40 of 256 MB); kernels inline the chain.
        for _ in range({ {"f.evaluate(x)": 40, "k(x)": 2000}.get(call, 1) }):
            y = (y * 1.0001).tanh()
        f.output(y)
        k = f.schedule(f.heuristics(device=tf.Device.cpu()), tf.Device.cpu())
        x = np.ones(2**26, np.float32)
        print("ready", flush=True)
        start = time.perf_counter()
        try:
            {call}
        except KeyboardInterrupt:
            print(f"interrupted after {{time.perf_counter() - start:.2f}} s", flush=True)
        """
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()  # else leaving `with Popen` waits for it forever
            pytest.fail("the call went on 60 s after Ctrl-C")
        answered = time.perf_counter() - sent
    assert "interrupted" in out, out
    assert answered < 2.0, f"answered Ctrl-C after {answered:.2f} s"


# --- wrong results: one semantics on every device -----------------------------

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 89.0, -104.0], np.float32)


def _same(got: Any, want: Any, rtol: float = 3e-6) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.signbit(got) & (got == 0), np.signbit(want) & (want == 0))
    np.testing.assert_allclose(got, want, rtol=rtol, equal_nan=True)


def _outputs_same(f: tf.Fusion, device: tf.Device, *arrays: Any, rtol: float = 3e-6) -> None:
    """Each output of ``f`` (several) on ``device`` is ``_same`` as the
    reference's."""
    got, want = f.execute(*arrays, device=device), f.evaluate(*arrays)
    for g, w in zip(got, want, strict=True):
        _same(g, w, rtol=rtol)


@pytest.mark.parametrize(
    "op",
    ["exp", "tanh", "sigmoid", "relu", "gelu", "abs", "neg", "sqrt", "log", "reciprocal"],
)
def test_unary_special_values(device: tf.Device, op: str) -> None:
    f = tf.Fusion()
    x = f.input(SPECIAL.shape, "f32")
    f.output(getattr(x, op)())
    _same(f.execute(SPECIAL, device=device), f.evaluate(SPECIAL))


@pytest.mark.parametrize(
    "op",
    ["exp", "tanh", "sigmoid", "relu", "gelu", "abs", "neg", "sqrt", "log", "reciprocal"],
)
def test_unary_ops_on_literals(device: tf.Device, op: str) -> None:
    """WGSL evaluates arithmetic on literals when it creates a shader and
    rejects results out of range (``log(0.0)``): tilefuse evaluates it
    first, as the reference does."""
    f = tf.Fusion()
    x = f.input((3,), "f32")
    f.output(*(x + getattr(f.constant(float(c)), op)() for c in SPECIAL))
    a = np.random.default_rng(3).random(3, dtype=np.float32)
    _outputs_same(f, device, a)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "min", "pow"])
def test_binary_ops_on_literals(device: tf.Device, op: str) -> None:
    pairs = [(0.0, 0.0), (1.0, -0.0), (np.inf, np.inf), (np.inf, -np.inf), (-0.0, np.inf)]
    f = tf.Fusion()
    x = f.input((3,), "f32")
    f.output(*(x + f.constant(a)._binary(op, b) for a, b in pairs))
    a = np.random.default_rng(4).random(3, dtype=np.float32)
    _outputs_same(f, device, a)


def test_a_literal_condition_picks_its_branch(device: tf.Device) -> None:
    """4096 elements take the GPU's vec4 loops, where a literal bool has no
    place."""
    f = tf.Fusion()
    x = f.input((4096,), "f32")
    f.output(tf.where(f.constant(1.0) > 0.5, x, -x), tf.where(f.constant(0.0) > 0.5, x, -x))
    a = np.random.default_rng(5).standard_normal(4096).astype(np.float32)
    for got, want in zip(f.execute(a, device=device), (a, -a), strict=True):
        _same(got, want)


def test_exp_overflows_to_inf_and_underflows_to_zero(device: tf.Device) -> None:
    f = tf.Fusion()
    x = f.input((5,), "f32")
    f.output(x.exp(), x.sigmoid(), x.tanh())
    e, s, t = f.execute(np.array([89, np.inf, -np.inf, -110, np.nan], np.float32), device=device)
    np.testing.assert_array_equal(e[:4], [np.inf, np.inf, 0, 0])
    np.testing.assert_array_equal(s[:4], [1, 1, 0, 0])
    np.testing.assert_array_equal(t[:4], [1, 1, -1, -1])
    assert np.isnan(e[4]) and np.isnan(s[4]) and np.isnan(t[4])


@pytest.mark.parametrize("shape", [(), (3,)])
def test_each_op_rounds_to_f32(device: tf.Device, shape: tuple[int, ...]) -> None:
    """1e20 squared overflows f32 to inf, so it minus itself is NaN; a
    0-d kernel on the CPU once kept its steps in f64 and gave 0 (a fuzzer's
    find)."""
    f = tf.Fusion()
    x = f.input(shape, "f32")
    square = x * x
    f.output(square - square, (x + 1.0) - x)
    a = np.full(shape, 1e20, np.float32)
    nan, lost = f.execute(a, device=device)
    assert np.isnan(nan).all() and (lost == 0).all()


@pytest.mark.parametrize("op", ["max", "min", "add", "mul", "pow", "div"])
def test_binary_special_values(device: tf.Device, op: str) -> None:
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    a, b = a.ravel(), b.ravel()
    f = tf.Fusion()
    x, y = f.input(a.shape, "f32"), f.input(b.shape, "f32")
    f.output(x._binary(op, y))
    # GPU pow is exp2(y * log2(x)) in f32: a few ulp off for large results.
    _same(f.execute(a, b, device=device), f.evaluate(a, b), rtol=2e-5 if op == "pow" else 3e-6)
    with np.errstate(all="ignore"):
        numpy_op = {"max": np.maximum, "min": np.minimum, "pow": np.power}.get(op)
        if numpy_op is not None:  # numpy's meaning (numpy's max/min of +-0 keep an operand)
            np.testing.assert_allclose(f.evaluate(a, b), numpy_op(a, b), equal_nan=True)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "min", "pow"])
@pytest.mark.parametrize("constant", [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("size", [9, 4096], ids=["scalar", "vectorized"])
def test_literal_operands_special_values(
    device: tf.Device, op: str, constant: float, size: int
) -> None:
    """A literal on either side, zeros included (compilers fold ``x * 0``,
    ``x / 0``, ``0 / x`` and ``0 - x`` as if x were finite and zeros
    unsigned); 4096 elements take the GPU's vec4 loops."""
    a = np.resize(SPECIAL, size)
    f = tf.Fusion()
    x = f.input(a.shape, "f32")
    f.output(x._binary(op, constant), x._binary(op, constant, reverse=True))
    _outputs_same(f, device, a, rtol=2e-5 if op == "pow" else 3e-6)


def test_a_tensor_minus_itself(device: tf.Device) -> None:
    """``x - x`` is NaN at NaN and infinities, though compilers that assume
    finite math fold it to 0: the GPU device asks the driver to preserve
    special values (SPIR-V float controls), where it can."""
    if not preserves_nan(device):
        if in_ci():  # CI's lavapipe takes float controls: losing them fails
            pytest.fail(f"{device} lost SPIR-V float controls")
        pytest.skip(f"{device} cannot be asked to preserve NaN (docs/semantics.md)")
    f = tf.Fusion()
    x = f.input(SPECIAL.shape, "f32")
    f.output(x - x, x * x - x * x)
    _outputs_same(f, device, SPECIAL)


def test_pow_at_negative_bases_zero_and_nan(device: tf.Device) -> None:
    f = tf.Fusion()
    x, y = f.input((4,), "f32"), f.input((4,), "f32")
    f.output(x**y, x**-1.0)
    base = np.array([-2, -0.5, 0, np.nan], np.float32)
    got, inverse = f.execute(base, np.array([2, 3, -1, np.nan], np.float32), device=device)
    # A GPU's pow is exp2(y * log2 |x|): a few ulp off (an H100 gave
    # -0.12500004 for -0.5 ** 3), with the sign, infinities and NaN exact.
    close = partial(np.testing.assert_allclose, rtol=1e-6, atol=0)
    close(got, [4, -0.125, np.inf, np.nan])
    close(inverse, [-0.5, -2, np.inf, np.nan])


@pytest.mark.parametrize("dtype", ["i32", "u32"])
def test_float_to_int_casts_saturate_and_nan_is_zero(device: tf.Device, dtype: str) -> None:
    f = tf.Fusion()
    x = f.input((7,), "f32")
    f.output(x.astype(dtype))
    a = np.array([np.nan, 1e10, -1e10, 2.7, -2.7, np.inf, -np.inf], np.float32)
    got = f.execute(a, device=device)
    np.testing.assert_array_equal(got, f.evaluate(a))
    info = np.iinfo(np.int32 if dtype == "i32" else np.uint32)
    assert got[0] == 0 and got[1] == info.max and got[2] == info.min


@pytest.mark.parametrize("op", ["max", "min"])
def test_reductions_propagate_nan(device: tf.Device, op: str) -> None:
    f = tf.Fusion()
    x = f.input((4, 64), "f32")
    f.output(x._reduce(op, 1, False), x._reduce(op, 0, False))
    a = np.random.default_rng(1).random((4, 64), dtype=np.float32)
    a[2, 17] = np.nan
    rows, cols = f.execute(a, device=device)
    assert np.isnan(rows[2]) and not np.isnan(rows[[0, 1, 3]]).any()
    assert np.isnan(cols[17]) and np.isnan(cols).sum() == 1


@pytest.mark.parametrize(
    ("op", "want"), [("sum", 0.0), ("max", -np.inf), ("min", np.inf), ("mean", np.nan)]
)
def test_reductions_over_an_empty_axis(device: tf.Device, op: str, want: float) -> None:
    f = tf.Fusion()
    x = f.input((3, 0), "f32")
    f.output(x._reduce(op, 1, False))
    a = np.ones((3, 0), np.float32)
    for got in (f.execute(a, device=device), f.evaluate(a)):
        np.testing.assert_array_equal(got, [want] * 3)
        assert not np.signbit(got).any() or want < 0


@pytest.mark.parametrize(
    "empty",
    [
        lambda a, b: a @ b,
        lambda a, b: a.sum(axis=1, keepdims=True),
        lambda a, b: a.max(axis=1, keepdims=True),
        lambda a, b: b.min(axis=0, keepdims=True),
        lambda a, b: a.mean(axis=1, keepdims=True),
    ],
    ids=["matmul", "sum", "max", "min", "mean"],
)
@pytest.mark.parametrize(
    "op",
    [
        lambda c, r: c / r,
        lambda c, r: r / c,
        lambda c, r: c * r,
        lambda c, r: c - r,
        lambda c, r: r - c,
        lambda c, r: c + r,
    ],
    ids=["c/r", "r/c", "c*r", "c-r", "r-c", "c+r"],
)
def test_arithmetic_on_empty_reductions(device: tf.Device, empty: Any, op: Any) -> None:
    """A driver that learns an empty reduction's value r folds the arithmetic
    around it as if values were finite (lavapipe gave 3 / (a @ b) with k = 0
    as 0, not inf)."""
    f = tf.Fusion()
    a, b, c = f.input((1, 0), "f32"), f.input((0, 1), "f32"), f.input((), "f32")
    f.output(op(c, empty(a, b)))
    k = f.schedule(f.heuristics(device=device), device)
    for value in [3, -2.5, np.inf, -np.inf, 0, -0.0]:
        args = (np.ones((1, 0), np.float32), np.ones((0, 1), np.float32), np.float32(value))
        _same(k(*args), f.evaluate(*args))


def test_an_empty_reduction_across_invocations_combines_in_workgroup_memory(
    gpu: tf.Device,
) -> None:
    """Its partials are known literals, but the lanes still combine through
    workgroup memory, not subgroup shuffles that subgroups off forbids."""
    f = tf.Fusion()
    x = f.input((0,), "f32")
    f.output(x.sum())
    p = f.heuristics(device=gpu, cache=False).to_dict()
    p.update(cross_invocation_inner_reduction=True, reduction_invocations=64)
    p.update(persistent_kernel=True, rows_per_workgroup=2, vectorization_factor_reduction=4)
    p["launch"]["workgroup_size"] = [64, 1, 1]
    p["compile"]["use_subgroups"] = False
    got = f.schedule(p, gpu)(np.ones(0, np.float32))
    _same(got, 0.0)


def test_a_sum_of_negative_zeros_is_negative_zero(device: tf.Device) -> None:
    f = tf.Fusion()
    a, b = f.input((1, 3), "f32"), f.input((3, 1), "f32")
    f.output((a @ b).reciprocal(), a.sum().reciprocal())
    args = (-np.ones((1, 3), np.float32), np.zeros((3, 1), np.float32))
    for got in (f.execute(*args, device=device), f.evaluate(*args)):
        np.testing.assert_array_equal(got[0], [[-np.inf]])


def test_loop_names_cannot_inject_code() -> None:
    s = chain_fusion().create_schedule()
    (i,) = s.get_loops(s.get_blocks()[-1])
    with pytest.raises(tf.ScheduleError, match="not an identifier"):
        s.split(i, [None, 2], names=["a\nreturn;\n//", "b"])


# --- empty and size-1 dimensions --------------------------------------------


def _softmax(x: tf.Tensor) -> tf.Tensor:
    e = (x - x.max(axis=1, keepdims=True)).exp()
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("shapes", "build"),
    [
        ([(0, 16)], lambda x: x + 1.0),
        ([(16, 0)], lambda x: x + 1.0),
        ([(0, 16)], _softmax),
        ([(16, 0)], _softmax),
        ([(8, 0), (0, 8)], lambda a, b: a @ b),
        ([(0, 4), (4, 8)], lambda a, b: (a @ b).relu()),
        ([(1, 1, 1)], lambda x: x.mean(axis=(0, 2), keepdims=True)),
        # Found by the fuzzer: an outer reduction with no output elements
        # spread its rows over a grid of 0 workgroups on the CPU.
        ([(0, 0, 2, 16, 0)], lambda x: x.sum(axis=(2, 3))),
        # The empty matmul's 0 is a literal, beside a vec4 step's loads.
        ([(0, 0), (0, 8), ()], lambda a, b, c: a @ b + c),
    ],
)
def test_empty_and_size_one_dimensions(device: tf.Device, shapes: Any, build: Any) -> None:
    f = tf.Fusion()
    f.output(build(*(f.input(s, "f32") for s in shapes)))
    arrays = [np.random.default_rng(2).random(s, dtype=np.float32) for s in shapes]
    _same(f.execute(*arrays, device=device), f.evaluate(*arrays))


# --- inconsistent or unfriendly ---------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda f: (f.input((4, 8, 2), "f32") * 2.0, f.input((3,), "f32") + 1.0),
        lambda f: ((f.input((1,) * 12, "f32") * 2.0),),
        lambda f: (f.input((4, 8), "f32").mean(),),
        lambda f: (f.input((4, 8), "f32").mean(axis=(0, 1), keepdims=True),),
        lambda f: (f.input((3, 4, 5), "f32").sum(axis=(0, 2)),),
        lambda f: (f.input((3, 4, 5), "f32").max(axis=(0, 2), keepdims=True),),
        lambda f: (f.input((), "f32").sum(),),
    ],
)
def test_heuristics_are_accepted_by_their_scheduler(device: tf.Device, build: Any) -> None:
    f = tf.Fusion()
    f.output(*build(f))
    arrays = [np.random.default_rng(3).random(t.shape, dtype=np.float32) for t in f.inputs]
    got = f.schedule(f.heuristics(device=device), device)(*arrays)
    want = f.evaluate(*arrays)
    for g, w in zip(*((got, want) if len(f.outputs) > 1 else ((got,), (want,))), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_constant_and_input_outputs_of_segmented_fusions(device: tf.Device) -> None:
    f = tf.Fusion()
    a, b = f.input((8, 8), "f32"), f.input((8, 8), "f32")
    f.output((a @ b).exp().sum(axis=0), f.constant(1.5), a)
    k = f.schedule(f.heuristics(device=device), device)
    assert isinstance(k, tf.SegmentedKernel)
    x, y = np.random.default_rng(5).random((2, 8, 8), dtype=np.float32)
    total, constant, copy_of_a = k(x, y)
    np.testing.assert_allclose(total, f.evaluate(x, y)[0], rtol=1e-5)
    assert constant == 1.5 and copy_of_a is not x
    np.testing.assert_array_equal(copy_of_a, x)
    into = np.full((8, 8), np.nan, np.float32)
    assert k(x, y, out=(None, None, into))[2] is into
    np.testing.assert_array_equal(into, x)
    f.output(a + 1.0)  # added after scheduling: the kernel keeps its outputs
    assert len(k(x, y)) == 3


@pytest.mark.parametrize(
    "call",
    [
        lambda f: f.heuristics(device=CPU),
        lambda f: f.create_schedule(),
        lambda f: f.segments(),
        lambda f: f.evaluate(np.ones(3, np.float32)),
    ],
)
def test_fusions_without_outputs_are_rejected_everywhere(call: Callable[[tf.Fusion], Any]) -> None:
    f = tf.Fusion()
    f.input((3,), "f32")
    with pytest.raises(tf.FusionError, match="no outputs"):
        call(f)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda f: f.input((2**64,), "f32"), tf.FusionError, "input shape"),
        (lambda f: f.input((4,), "f32") + 10**400, tf.FusionError, "constant"),
        (lambda f: f.input((4,), "f32").reshape(2**70), tf.FusionError, "reshape"),
        (lambda f: f.input((4,), "f32").sum(axis=2**65), tf.FusionError, "axis"),
    ],
)
def test_integers_out_of_range_name_the_argument(
    call: Callable[[tf.Fusion], Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        call(tf.Fusion())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"effort": "fast"}, tf.ParamsError, "effort: unknown variant `fast`"),
        ({"strategy": "beam"}, tf.ParamsError, "strategy: unknown variant `beam`"),
        ({"trials": -1}, tf.ParamsError, "trials: must be a whole number, 0 or more, got -1"),
        ({"trials": 2.5}, tf.ParamsError, "trials: must be a whole number, 0 or more, got 2.5"),
        ({"seconds": float("nan")}, tf.ParamsError, "seconds: .* got NaN"),
        ({"seconds": -float("inf")}, tf.ParamsError, "seconds: .* got -inf"),
        ({"seconds": -1}, tf.ParamsError, "seconds: must be a positive number of seconds"),
        ({"seconds": 0}, tf.ParamsError, "seconds: must be a positive number of seconds"),
        ({"device": "cuda"}, ValueError, "unknown device 'cuda'"),
    ],
)
def test_bad_tuning_arguments_name_the_argument(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        tf.tune(chain_fusion(), **{"device": CPU, "cache": False, "progress": False, **kwargs})


def test_one_params_object_for_a_segmented_fusion_asks_for_a_list() -> None:
    f = tf.workloads.get("attention", seq=8, dim=4).fusion()
    first = f.heuristics(device=CPU)[0]  # type: ignore[index]
    with pytest.raises(tf.ParamsError, match=r"runs as segments \(matmul, reduction, matmul\)"):
        f.schedule(first, CPU)


def test_an_infinite_tuning_time_is_no_time_limit() -> None:
    r = tf.tune(chain_fusion(), CPU, trials=3, seconds=float("inf"), cache=False, progress=False)
    assert r.best_time > 0


def test_schedule_takes_a_params_dict() -> None:
    f = chain_fusion()
    k = f.schedule(f.heuristics(device=CPU).to_dict(), CPU)
    np.testing.assert_allclose(k(np.ones(64, np.float32)), np.exp(2.0), rtol=1e-6)


@pytest.mark.parametrize("device", [CPU, "gpu"])
@pytest.mark.parametrize("method", ["heuristics", "schedule", "tunables"])
def test_a_device_in_the_first_argument_says_to_pass_it_by_keyword(
    device: Any, method: str
) -> None:
    """``f.heuristics(device)`` took the device for a scheduler name, and
    ``f.schedule(device)`` for params (an AttributeError, or a string read
    as a list of per-segment params)."""
    with pytest.raises(TypeError, match=rf"{method}\(\): .* got a device .*by keyword"):
        getattr(chain_fusion(), method)(device)


def test_a_bad_device_variable_is_a_device_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEFUSE_DEVICE", "cuda")
    with pytest.raises(tf.DeviceError, match="TILEFUSE_DEVICE"):
        tf.Device.default()


def test_mesa_gets_a_runtime_dir_when_none_is_set() -> None:
    result = run_python(
        """
        import os
        os.environ.pop("XDG_RUNTIME_DIR", None)
        import tilefuse as tf
        try:
            tf.Device.gpu()
        except tf.DeviceError:
            pass
        print(os.environ.get("XDG_RUNTIME_DIR"))
        """
    )
    assert "tilefuse-runtime-" in result.stdout
    assert "XDG_RUNTIME_DIR is invalid" not in result.stderr


@pytest.mark.parametrize("clone", [lambda k: pickle.loads(pickle.dumps(k)), copy.deepcopy])
def test_kernels_schedules_and_devices_pickle(
    device: tf.Device, clone: Callable[[Any], Any]
) -> None:
    f = chain_fusion()
    k = f.schedule(f.heuristics(device=device), device)
    x = np.random.default_rng(4).random(64, dtype=np.float32)
    k2 = clone(k)
    assert k2.device.is_gpu == device.is_gpu
    np.testing.assert_array_equal(k2(x), k(x))
    assert str(clone(k.schedule)) == str(k.schedule)
    # A kernel of a canonicalized fusion (reduced axes moved together)
    # replays on the fusion its trace was recorded on.
    scattered = tf.Fusion()
    scattered.output(scattered.input((3, 4, 5), "f32").sum(axis=(0, 2)))
    ks = scattered.schedule(scattered.heuristics(device=device), device)
    y = np.random.default_rng(9).random((3, 4, 5), dtype=np.float32)
    np.testing.assert_array_equal(clone(ks)(y), ks(y))
    seg = tf.Fusion()
    a, b = seg.input((4, 8), "f32"), seg.input((8, 4), "f32")
    seg.output((a @ b).exp().sum(axis=0))
    sk = seg.schedule(seg.heuristics(device=device), device)
    args = [np.ones((4, 8), np.float32), np.ones((8, 4), np.float32)]
    np.testing.assert_array_equal(clone(sk)(*args), sk(*args))


def test_threads_read_while_another_writes() -> None:
    f = tf.Fusion()
    x = f.input((2**20,), "f32")
    f.output((x * 2.0).tanh())
    a = np.ones(2**20, np.float32)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(5):
                f.evaluate(a)
                f.create_schedule().build(CPU)
        except BaseException as e:
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(200):  # writes while the readers' calls are in flight
        x + float(i)
    for t in readers:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("ops", [2000])
def test_long_chains_schedule_in_linear_memory(device: tf.Device, ops: int) -> None:
    f = tf.Fusion()
    x = f.input((64,), "f32")
    y = x
    for i in range(ops):
        y = y * 1.0001 + 0.5 if i % 2 else y * 0.999
    f.output(y)
    a = np.random.default_rng(5).random(64, dtype=np.float32)
    start = time.perf_counter()
    k = f.schedule(f.heuristics(device=device), device)
    assert time.perf_counter() - start < 10
    np.testing.assert_allclose(k(a), f.evaluate(a), rtol=1e-4)


@pytest.mark.parametrize("cls", [tf.PointwiseParams, tf.ReductionParams, tf.MatmulParams])
def test_help_documents_every_field(cls: type[tf.ParamsStruct]) -> None:
    import pydoc

    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    schema = cls.json_schema()
    for name, field in schema["properties"].items():
        assert f"{name} (" in text, name
        if "description" in field:
            assert " ".join(field["description"].split())[:40] in " ".join(text.split()), name
    assert "break_point (integer 0..8, default 0)" in text or cls is not tf.PointwiseParams


def test_derived_fields_follow_the_others(device: tf.Device) -> None:
    """Fields that follow from others default to null ("derived"): a
    partial params dict means "these choices, the rest as the scheduler
    sees fit"."""
    f = tf.Fusion()
    x = f.input((64, 1000), "f32")
    f.output(x.sum(axis=1))
    a = np.random.default_rng(6).random((64, 1000), dtype=np.float32)
    p = tf.ReductionParams(fastest_dim=True)
    assert p.rows_per_workgroup is None and p.launch.workgroup_size is None
    np.testing.assert_allclose(f.schedule(p, device)(a), a.sum(axis=1), rtol=1e-5)

    mm = tf.Fusion()
    ma, mb = mm.input((128, 64), "f32"), mm.input((64, 128), "f32")
    mm.output(ma @ mb)
    tiles = {"cta_tile": {"m": 64, "n": 64, "k": 32}, "warp_tile": {"m": 32, "n": 32, "k": 32}}
    tiles["instruction_tile"] = {"m": 8, "n": 8, "k": 16}
    p = tf.MatmulParams.from_dict({"tile_sizes": tiles})
    b = np.random.default_rng(7).random((64, 128), dtype=np.float32)
    c = np.random.default_rng(8).random((128, 64), dtype=np.float32)
    np.testing.assert_allclose(mm.schedule(p, device)(c, b), c @ b, rtol=1e-4)
    heuristic = mm.heuristics(device=device)
    heuristic.tile_sizes.warp_tile.m = heuristic.tile_sizes.instruction_tile.m  # an edit
    np.testing.assert_allclose(mm.schedule(heuristic, device)(c, b), c @ b, rtol=1e-4)
    with pytest.raises(tf.ParamsError, match="leave it null") as err:
        p.launch.workgroup_size = [4, 4, 1]
        mm.schedule(p, device)
    assert err.value.path == "launch.workgroup_size"
