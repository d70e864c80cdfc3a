"""f16 and bf16 on every device: each op against the reference on fresh
random inputs, special values, empty and size-1 dimensions, numpy in and
out (``ml_dtypes.bfloat16`` for bf16), promotion and the wrong-dtype
errors (``docs/semantics.md``, its half-precision section)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tilefuse as tf
from conftest import run_exported_with_wgpu_py
from tilefuse.cli import main
from tilefuse.tensor import NUMPY_DTYPES, RTOL_FLOOR
from tilefuse.workload import Tolerance, compare_outputs

HALVES = ["f16", "bf16"]
Build = Callable[..., tf.Tensor]


@pytest.fixture(params=HALVES)
def half(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def arrays(
    rng: np.random.Generator,
    dtype: str,
    *shapes: tuple[int, ...],
    lo: float = -2.0,
    hi: float = 2.0,
) -> list[np.ndarray[Any, Any]]:
    return [rng.uniform(lo, hi, size=s).astype(NUMPY_DTYPES[dtype]) for s in shapes]


def check(build: Build, device: tf.Device, *xs: np.ndarray[Any, Any]) -> list[Any]:
    """Runs ``build`` over inputs like ``xs`` on ``device`` and checks every
    output against the reference, in the outputs' dtypes; returns them."""
    f = tf.Fusion()
    ins = [f.input(x.shape, x.dtype, name=f"in{i}") for i, x in enumerate(xs)]
    outs = build(*ins)
    for o in outs if isinstance(outs, tuple) else (outs,):
        f.output(o)
    want = f.evaluate(*xs)
    got = f.execute(*xs, device=device)
    want, got = (list(w) if isinstance(w, list | tuple) else [w] for w in (want, got))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
    verdict = compare_outputs(got, want, Tolerance(rtol=1e-5))
    assert verdict.passed, verdict.mismatch
    return got


UNARY = [
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "sin",
    "cos",
    "reciprocal",
]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op: str, half: str, device: tf.Device, rng: np.random.Generator) -> None:
    positive = op in ("log", "sqrt", "rsqrt", "reciprocal")
    (x,) = arrays(rng, half, (7, 33), lo=0.05 if positive else -4.0, hi=4.0)
    check(lambda t: -t if op == "neg" else getattr(t, op)(), device, x)


BINARY: dict[str, Build] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "max": tf.maximum,
    "min": tf.minimum,
    "compare": lambda a, b: (a < b, a == b, a >= b),
    "where": lambda a, b: tf.where(a > b, a, b * 0.5),
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcasts(op: str, half: str, device: tf.Device, rng: np.random.Generator) -> None:
    a, b = arrays(rng, half, (4, 9), (9,), lo=0.25, hi=2.0)
    check(BINARY[op], device, a, b)


@pytest.mark.parametrize("to", ["f32", "f16", "bf16", "i32", "u32", "bool"])
def test_casts_to_and_from_every_dtype(
    to: str, half: str, device: tf.Device, rng: np.random.Generator
) -> None:
    (x,) = arrays(rng, half, (40,), lo=-300.0, hi=300.0)
    if to == "u32":
        x = np.abs(x)
    check(lambda t: t.astype(to), device, x)
    back = rng.uniform(-300, 300, size=(40,)).astype(NUMPY_DTYPES[to] if to != "bool" else bool)
    check(lambda t: t.astype(half), device, back)


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_reductions_accumulate_in_f32(
    op: str, axis: int | None, half: str, device: tf.Device, rng: np.random.Generator
) -> None:
    (x,) = arrays(rng, half, (37, 300), lo=0.0, hi=1.0)
    (got,) = check(lambda t: getattr(t, op)(axis=axis), device, x)
    if op == "sum" and axis == 1:
        # 300 terms rounded at each step would be off by far more than
        # the dtype's precision; accumulated in f32 they are not.
        exact = x.astype(np.float64).sum(axis=1)
        rel = np.abs(got.astype(np.float64) - exact) / exact
        assert rel.max() <= RTOL_FLOOR[half]


def test_matmul_bias_relu(half: str, device: tf.Device, rng: np.random.Generator) -> None:
    a, b, bias = arrays(rng, half, (33, 70), (70, 20), (20,), lo=-1.0, hi=1.0)
    check(lambda x, w, c: tf.relu(x @ w + c), device, a, b, bias)


def test_matmul_out_dtype(half: str, device: tf.Device, rng: np.random.Generator) -> None:
    """f32 sums of half operands kept in f32 (an f32 epilogue on them), and
    f32 operands rounded once to a half; anything but a float is refused."""
    a, b = arrays(rng, half, (2, 33, 70), (70, 20), lo=-1.0, hi=1.0)
    (bias,) = arrays(rng, "f32", (20,))
    (got,) = check(lambda x, w, c: tf.matmul(x, w, out_dtype="f32") * c, device, a, b, bias)
    assert got.dtype == np.float32
    wide = [x.astype(np.float32) for x in (a, b)]
    (got,) = check(lambda x, w: tf.matmul(x, w, out_dtype=half), device, *wide)
    assert got.dtype == NUMPY_DTYPES[half]
    f = tf.Fusion()
    x = f.input((2, 2), half)
    with pytest.raises(tf.FusionError, match=r"out_dtype must be a float .* got i32"):
        tf.matmul(x, x, out_dtype="i32")


def test_softmax_and_layernorm(half: str, device: tf.Device, rng: np.random.Generator) -> None:
    (x,) = arrays(rng, half, (16, 333))

    def softmax_layernorm(t: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        e = (t - t.max(axis=1, keepdims=True)).exp()
        mu = t.mean(axis=1, keepdims=True)
        var = ((t - mu) * (t - mu)).mean(axis=1, keepdims=True)
        return e / e.sum(axis=1, keepdims=True), (t - mu) * (var + 1e-5).rsqrt()

    check(softmax_layernorm, device, x)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1), (1, 7), (0,)])
def test_empty_and_size_1_dimensions(
    shape: tuple[int, ...], half: str, device: tf.Device, rng: np.random.Generator
) -> None:
    (x,) = arrays(rng, half, shape)
    check(lambda t: (t * 2 + 1, t.sum(axis=-1), t.max(axis=0)), device, x)


SPECIAL = [
    np.nan,
    np.inf,
    -np.inf,
    0.0,
    -0.0,
    1.0,
    -3.5,
    65504.0,
    -65504.0,
    6e-8,
    6.1e-5,
    1.00390625,
    1.01171875,
    3.0e38,
]


def test_special_values_overflow_and_subnormals(half: str, device: tf.Device) -> None:
    dtype = NUMPY_DTYPES[half]
    with np.errstate(over="ignore"):  # 3e38 is past f16: inf, as wanted
        a = np.repeat(np.array(SPECIAL), len(SPECIAL)).astype(dtype)
        b = np.tile(np.array(SPECIAL), len(SPECIAL)).astype(dtype)
    got = check(
        lambda x, y: (x + y, x * y, x / y, tf.maximum(x, y), x.exp(), (x * 2) / 2), device, a, b
    )
    n = len(SPECIAL)
    at = lambda x, y: SPECIAL.index(x) * n + SPECIAL.index(y)  # noqa: E731
    if half == "f16":
        # 65504 * 2 overflows f16 to inf, and stays inf when halved.
        assert np.isposinf(got[5][at(65504.0, 1.0)])
        # 6e-8 is f16's smallest subnormal: kept on every device.
        assert got[0][at(6e-8, 0.0)] == np.float16(6e-8) != 0
    else:
        # A tie rounds to the even neighbour: 1 + 2^-8 is 1 in bf16.
        one = np.array([1.0], dtype)
        tie = np.array([2.0**-8], dtype)
        (s,) = check(lambda x, y: x + y, device, one, tie)
        assert float(s[0]) == 1.0


def test_numpy_in_and_out_without_copies(
    half: str, device: tf.Device, rng: np.random.Generator
) -> None:
    f = tf.Fusion()
    x = f.input((8, 9), half, name="x")
    f.output(x * 3)
    k = f.schedule(f.heuristics(device=device), device=device)
    (a,) = arrays(rng, half, (8, 9))
    out = np.empty((8, 9), NUMPY_DTYPES[half])
    assert k(a, out=out) is out
    np.testing.assert_array_equal(out.astype(np.float64), f.evaluate(a).astype(np.float64))
    # A non-contiguous view is read where it lies, as a copy would be.
    wide = np.zeros((8, 18), NUMPY_DTYPES[half])
    wide[:, ::2] = a
    np.testing.assert_array_equal(k(wide[:, ::2]).view(np.uint16), out.view(np.uint16))


def test_the_wrong_dtype_names_the_input(half: str) -> None:
    f = tf.Fusion()
    x = f.input((4,), half, name="x")
    f.output(x + 1)
    k = f.schedule(device="cpu")
    with pytest.raises(tf.FusionError, match=rf"input 0 \(x\): expected {half}\[4\], got f32\[4\]"):
        k(np.ones(4, np.float32))
    other = "bf16" if half == "f16" else "f16"
    with pytest.raises(tf.FusionError, match=rf"expected {half}\[4\], got {other}\[4\]"):
        k(np.ones(4, NUMPY_DTYPES[other]))
    with pytest.raises(tf.FusionError, match="float16, bfloat16"):
        k(np.ones(4, np.float64))


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [("f16", "f32", "f32"), ("bf16", "f32", "f32"), ("f16", "bf16", "f32"), ("f16", "f16", "f16")],
)
def test_mixed_operands_promote(a: str, b: str, want: str) -> None:
    f = tf.Fusion()
    x, y = f.input((3,), a), f.input((3,), b)
    assert (x + y).dtype == want
    assert (y * x).dtype == want
    assert (x + 1.5).dtype == a
    assert tf.where(x > 0, x, y).dtype == want


def test_dtype_names() -> None:
    f = tf.Fusion()
    for spelling, name in [
        ("float16", "f16"),
        (np.float16, "f16"),
        ("bfloat16", "bf16"),
        (ml_dtypes.bfloat16, "bf16"),
        ("bf16", "bf16"),
    ]:
        assert f.input((1,), spelling).dtype == name


@pytest.mark.parametrize(
    "name", ["chain", "softmax", "layernorm", "rmsnorm", "row_sum", "column_sum", "matmul"]
)
def test_built_in_workloads_take_a_dtype(name: str, half: str, device: tf.Device) -> None:
    sizes = {"m": 24, "n": 40, "k": 16} if name == "matmul" else {"rows": 24, "cols": 40}
    w = tf.workloads.get(name, dtype=half, **sizes)
    assert {a.dtype for a in w.inputs()} == {NUMPY_DTYPES[half]}
    assert tf.Engine(device).verify(w).passed
    assert w.key != tf.workloads.get(name, **sizes).key
    with pytest.raises(ValueError, match="dtype must be one of f32, f16, bf16"):
        tf.workloads.get(name, dtype="f64")


def test_tune_a_half_workload_from_the_command_line(
    half: str, own_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "row_sum", "--size", "rows=16", "--size", "cols=48", "--dtype", half]
    assert main([*argv, "--device", "cpu", "--trials", "3", "--seed", "1"]) == 0
    assert "best" in capsys.readouterr().out
    f = tf.workloads.get("row_sum", rows=16, cols=48, dtype=half).payload
    assert tf.cache.lookup(f, tf.Device.cpu()) is not None
    with pytest.raises(SystemExit, match=f"--dtype {half} but --size dtype=f32"):
        main([*argv, "--size", "dtype=f32"])


def test_bench_inspect_and_run_take_a_dtype(
    half: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "tiny.yaml"
    suite.write_text(
        "version: 1\nworkloads:\n"
        "  - workload: softmax\n    sizes: {rows: 8, cols: 40}\n"
        "  - workload: matmul\n    sizes: {m: 8, n: 16, k: 24}\n"
    )
    assert tf.suite.load_suite(suite, dtype=half).workloads[1].dtype == half
    out = tmp_path / "bench.json"
    argv = ["bench", str(suite), "--device", "cpu", "--dtype", half, "--json", str(out)]
    assert main([*argv, "--warmup", "0", "--rep", "0.01", "--quiet"]) == 0
    keys = [r["workload"] for r in json.loads(out.read_text())["results"]]
    assert all(f"dtype={half}" in k for k in keys), keys
    assert main(["inspect", "softmax", "--size", "rows=8", "--dtype", half]) == 0
    assert half in capsys.readouterr().out
    run = ["run", "--workload", "softmax", "--size", "rows=8", "--size", "cols=40"]
    assert main([*run, "--dtype", half, "--device", "cpu", "--quiet"]) == 0


def test_exported_half_kernels_run_through_wgpu_py(
    half: str, gpu: tf.Device, tmp_path: Path
) -> None:
    """A half kernel's files run on another WebGPU host, in numpy's layout
    (an odd length too): a CPU kernel's WGSL packs halves in words, so any
    host runs it; a GPU kernel's holds f16 in f16 arrays where the device
    has ``shader-f16``, and its JSON asks for the feature."""
    w = tf.workloads.get("softmax", rows=9, cols=33, dtype=half)
    for device in (tf.Device.cpu(), gpu):
        kernel = tf.Engine(device).lower(w)
        assert isinstance(kernel, tf.Kernel)
        native = half == "f16" and "shader_f16" in device.info["features"]
        assert ("shader-f16" in kernel.features) == native
        assert ("array<f16>" in kernel.wgsl) == native
        manifest = kernel.export(tmp_path / ("gpu" if device.is_gpu else "cpu"), "softmax")
        spec = json.loads(manifest.read_text())
        assert spec["features"] == kernel.features
        assert [b["bytes"] for b in spec["bindings"]] == [4 * 149, 4 * 149]
        (got,) = run_exported_with_wgpu_py(manifest, *w.inputs())
        assert got.dtype == NUMPY_DTYPES[half]
        verdict = compare_outputs([got], w.expected(), Tolerance(rtol=1e-5))
        assert verdict.passed, verdict.mismatch
