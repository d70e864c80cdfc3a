"""Every op through the reference evaluator against numpy, on fresh random
inputs (float64 reference, relative error bound)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tilefuse as tf
from conftest import assert_close

f32 = np.float32


def run(build: Callable[..., tf.Tensor], *arrays: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    f = tf.Fusion()
    inputs = [f.input(a.shape, a.dtype, name=f"in{i}") for i, a in enumerate(arrays)]
    f.output(build(*inputs))
    return f.evaluate(*arrays)  # type: ignore[no-any-return]


def gelu_ref(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


UNARY: dict[str, tuple[Callable[[Any], Any], tuple[float, float]]] = {
    "neg": (np.negative, (-3, 3)),
    "abs": (np.abs, (-3, 3)),
    "exp": (np.exp, (-5, 5)),
    "log": (np.log, (0.01, 10)),
    "sqrt": (np.sqrt, (0.01, 10)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.01, 10)),
    "tanh": (np.tanh, (-4, 4)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-8, 8)),
    "relu": (lambda x: np.maximum(x, 0), (-3, 3)),
    "gelu": (gelu_ref, (-4, 4)),
    "sin": (np.sin, (-6, 6)),
    "cos": (np.cos, (-6, 6)),
    "reciprocal": (np.reciprocal, (0.1, 10)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str, rng: np.random.Generator) -> None:
    ref, (lo, hi) = UNARY[name]
    x = rng.uniform(lo, hi, size=(7, 33)).astype(f32)
    y = run(lambda t: getattr(t, name)() if name != "neg" else -t, x)
    assert y.dtype == f32
    assert_close(y, ref(x.astype(np.float64)))


BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "max": lambda a, b: tf.maximum(a, b) if isinstance(a, tf.Tensor) else np.maximum(a, b),
    "min": lambda a, b: tf.minimum(a, b) if isinstance(a, tf.Tensor) else np.minimum(a, b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((5, 6), (5, 6)), ((4, 1), (3,)), ((2, 1, 4), (3, 1))])
def test_binary_broadcasts(
    name: str, shapes: tuple[tuple[int, ...], ...], rng: np.random.Generator
) -> None:
    a = rng.uniform(0.5, 2.0, size=shapes[0]).astype(f32)
    b = rng.uniform(0.5, 2.0, size=shapes[1]).astype(f32)
    fn = BINARY[name]
    assert_close(run(fn, a, b), fn(a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons(op: str, rng: np.random.Generator) -> None:
    # Small integer values make ties (and so eq / le / ge) actually occur.
    a = rng.integers(0, 4, size=(6, 8)).astype(f32)
    b = rng.integers(0, 4, size=(8,)).astype(f32)
    fn = getattr(
        np,
        {
            "lt": "less",
            "le": "less_equal",
            "gt": "greater",
            "ge": "greater_equal",
            "eq": "equal",
            "ne": "not_equal",
        }[op],
    )
    y = run(lambda x, z: getattr(x, f"__{op}__")(z), a, b)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, fn(a, b))


def test_scalars_and_reverse_operators(rng: np.random.Generator) -> None:
    a = rng.uniform(0.5, 2.0, size=(3, 5)).astype(f32)
    a64 = a.astype(np.float64)
    y = run(lambda x: (2.0 - x) * 3 + 1 / x - x**2 + 2**x, a)
    assert_close(y, (2.0 - a64) * 3 + 1 / a64 - a64**2 + 2**a64)


def test_where_and_masks(rng: np.random.Generator) -> None:
    a = rng.standard_normal((4, 9)).astype(f32)
    b = rng.standard_normal((9,)).astype(f32)
    y = run(lambda x, z: tf.where(x > z, x, z * 0.5), a, b)
    assert_close(y, np.where(a > b, a, b.astype(np.float64) * 0.5))
    y = run(lambda x: tf.where(x > 0, x, -np.inf), a)
    assert_close(y, np.where(a > 0, a, -np.inf))


def test_casts(rng: np.random.Generator) -> None:
    a = rng.uniform(-100, 100, size=(50,)).astype(f32)
    np.testing.assert_array_equal(run(lambda x: x.astype("i32"), a), a.astype(np.int32))
    np.testing.assert_array_equal(run(lambda x: x.astype(np.bool_), a), a.astype(bool))
    i = rng.integers(-1000, 1000, size=(50,)).astype(np.int32)
    assert_close(run(lambda x: x.astype(np.float32) * 0.5, i), i * 0.5)
    np.testing.assert_array_equal(run(lambda x: x.astype("u32"), i), i.astype(np.uint32))
    m = rng.integers(0, 2, size=(50,)).astype(bool)
    np.testing.assert_array_equal(run(lambda x: x.astype("f32"), m), m.astype(f32))


def test_integer_arithmetic(rng: np.random.Generator) -> None:
    a = rng.integers(-1000, 1000, size=(40,)).astype(np.int32)
    b = rng.integers(1, 50, size=(40,)).astype(np.int32)
    y = run(lambda x, z: (x + z) * 3 - z, a, b)
    np.testing.assert_array_equal(y, (a + b) * 3 - b)
    # WGSL integer division truncates toward zero (numpy's // floors).
    np.testing.assert_array_equal(run(lambda x, z: x / z, a, b), np.trunc(a / b).astype(np.int32))
    np.testing.assert_array_equal(run(lambda x: abs(-x).relu(), a), np.abs(a))
    u = rng.integers(0, 2**31, size=(40,)).astype(np.uint32)
    np.testing.assert_array_equal(run(lambda x: tf.maximum(x, 7) + 1, u), np.maximum(u, 7) + 1)


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(
    op: str, axis: int | tuple[int, ...] | None, keepdims: bool, rng: np.random.Generator
) -> None:
    x = rng.standard_normal((3, 17, 5)).astype(f32)
    y = run(lambda t: getattr(t, op)(axis=axis, keepdims=keepdims), x)
    assert_close(y, getattr(x.astype(np.float64), op)(axis=axis, keepdims=keepdims))


def test_integer_reductions(rng: np.random.Generator) -> None:
    x = rng.integers(-100, 100, size=(6, 7)).astype(np.int32)
    np.testing.assert_array_equal(run(lambda t: t.sum(axis=1), x), x.sum(axis=1))
    np.testing.assert_array_equal(run(lambda t: t.max(axis=0), x), x.max(axis=0))


def test_layout_ops(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 4)).astype(f32)
    np.testing.assert_array_equal(run(lambda t: t.permute(2, 0, 1), x), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(run(lambda t: t.T, x), x.T)
    np.testing.assert_array_equal(run(lambda t: t.reshape(6, -1), x), x.reshape(6, -1))
    assert_close(
        run(lambda t: t.sum(axis=1, keepdims=True).broadcast_to((2, 5, 4)), x),
        np.broadcast_to(x.astype(np.float64).sum(axis=1, keepdims=True), (2, 5, 4)),
    )


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transposes(ta: bool, tb: bool, rng: np.random.Generator) -> None:
    m, k, n = 13, 21, 9
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(f32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(f32)
    y = run(lambda x, z: tf.matmul(x, z, transpose_a=ta, transpose_b=tb), a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(y, (a64.T if ta else a64) @ (b64.T if tb else b64))


@pytest.mark.parametrize("mkn", [(5, 7, 3), (0, 4, 3), (4, 0, 3), (4, 5, 0), (1, 1, 1)], ids=str)
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_reference_over_batches_and_empty_dims(
    mkn: tuple[int, int, int], tb: bool, rng: np.random.Generator
) -> None:
    m, k, n = mkn
    a = rng.standard_normal((2, 1, k, m)).astype(f32)  # read transposed
    b = rng.standard_normal((1, 3, n, k) if tb else (1, 3, k, n)).astype(f32)
    y = run(lambda x, z: tf.matmul(x, z, transpose_a=True, transpose_b=tb), a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64.swapaxes(-1, -2) @ (b64.swapaxes(-1, -2) if tb else b64)
    assert y.shape == want.shape == (2, 3, m, n)
    assert_close(y, want)
    if k == 0:
        assert not np.signbit(y).any(), "a sum of no terms is +0"


def test_a_matmul_of_negative_zeros_is_negative_zero() -> None:
    a = np.full((2, 3), -0.0, f32)
    b = np.ones((3, 2), f32)
    assert np.signbit(run(lambda x, z: x @ z, a, b)).all()


def test_batched_matmul_with_epilogue(rng: np.random.Generator) -> None:
    a = rng.standard_normal((3, 8, 16)).astype(f32)
    b = rng.standard_normal((16, 5)).astype(f32)  # broadcast over the batch
    bias = rng.standard_normal((5,)).astype(f32)
    y = run(lambda x, z, c: (x @ z + c).relu(), a, b, bias)
    assert_close(y, np.maximum(a.astype(np.float64) @ b + bias, 0))


def test_softmax_and_layernorm(rng: np.random.Generator) -> None:
    x = rng.standard_normal((64, 128)).astype(f32)
    x64 = x.astype(np.float64)

    def softmax(t: tf.Tensor) -> tf.Tensor:
        e = (t - t.max(axis=1, keepdims=True)).exp()
        return e / e.sum(axis=1, keepdims=True)

    ref = np.exp(x64 - x64.max(axis=1, keepdims=True))
    assert_close(run(softmax, x), ref / ref.sum(axis=1, keepdims=True))

    def layernorm(t: tf.Tensor) -> tf.Tensor:
        mu = t.mean(axis=-1, keepdims=True)
        var = ((t - mu) ** 2.0).mean(axis=-1, keepdims=True)
        return (t - mu) * (var + 1e-5).rsqrt()

    mu = x64.mean(axis=-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    assert_close(run(layernorm, x), ref)


def test_multiple_outputs(rng: np.random.Generator) -> None:
    f = tf.Fusion()
    x = f.input((4, 4), "f32")
    f.output(x.exp(), x.sum(axis=0))
    a = rng.standard_normal((4, 4)).astype(f32)
    e, s = f.evaluate(a)
    assert_close(e, np.exp(a.astype(np.float64)))
    assert_close(s, a.astype(np.float64).sum(axis=0))


def test_inputs_are_checked(rng: np.random.Generator) -> None:
    f = tf.Fusion()
    x = f.input((4, 8), "f32", name="x")
    f.output(x.exp())
    with pytest.raises(
        tf.FusionError, match=r"input 0 \(x\): expected f32\[4, 8\], got f32\[4, 7\]"
    ):
        f.evaluate(np.ones((4, 7), f32))
    with pytest.raises(
        tf.FusionError, match=r"expected a numpy array of float32.*got an array of float64"
    ):
        f.evaluate(rng.standard_normal((4, 8)))
    with pytest.raises(tf.FusionError, match="takes 1 input, got 2"):
        f.evaluate(np.ones((4, 8), f32), np.ones((4, 8), f32))
    # The count is checked first: an extra argument is not a wrong type.
    with pytest.raises(tf.FusionError, match="takes 1 input, got 2"):
        f.evaluate(np.ones((4, 8), f32), [1.0])
    # Any memory layout is accepted.
    a = rng.standard_normal((8, 4)).astype(f32).T
    assert_close(f.evaluate(a), np.exp(a.astype(np.float64)))
