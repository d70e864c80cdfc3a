"""Fusion construction, verification, printing, JSON and fingerprints."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilefuse as tf

SOFTMAX = """
import tilefuse
f = tilefuse.Fusion()
x = f.input((4096, 4096), "f32", name="x")
e = (x - x.max(axis=1, keepdims=True)).exp()
f.output(e / e.sum(axis=1, keepdims=True))
"""


def softmax(name: str = "x", n: int = 4096, dtype: str = "f32") -> tf.Fusion:
    f = tf.Fusion()
    x = f.input((n, n), dtype, name=name)
    e = (x - x.max(axis=1, keepdims=True)).exp()
    f.output(e / e.sum(axis=1, keepdims=True))
    return f


def test_prints_readably() -> None:
    text = str(softmax())
    assert "x: f32[4096, 4096] = input(0)" in text
    assert "t1: f32[4096, 1] = max(x, axes=[1], keepdims=true)" in text
    assert text.strip().endswith("return t5\n}")


def test_json_round_trip_is_equal() -> None:
    f = softmax()
    back = tf.Fusion.from_json(f.to_json())
    assert back == f
    assert back.fingerprint == f.fingerprint
    assert json.loads(f.to_json(indent=True)) == json.loads(f.to_json())
    assert pickle.loads(pickle.dumps(f)) == f


def test_fingerprint_is_stable_across_processes() -> None:
    code = SOFTMAX + "print(f.fingerprint)"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert runs == {softmax().fingerprint}
    assert len(softmax().fingerprint) == 32


def test_fingerprint_ignores_names_and_sees_structure() -> None:
    base = softmax().fingerprint
    assert softmax(name="renamed").fingerprint == base
    assert softmax(n=2048).fingerprint != base
    g = tf.Fusion()
    x = g.input((4096, 4096), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    g.output(e / e.sum(axis=0, keepdims=True))  # different axis
    assert g.fingerprint != base
    h = tf.Fusion()
    x = h.input((4096, 4096), "f32", name="x")
    e = (x - x.min(axis=1, keepdims=True)).exp()  # different op
    h.output(e / e.sum(axis=1, keepdims=True))
    assert h.fingerprint != base
    i = tf.Fusion()
    x = i.input((4096, 4096), "i32", name="x")
    i.output(x.astype("f32"))
    j = tf.Fusion()
    x = j.input((4096, 4096), "u32", name="x")
    j.output(x.astype("f32"))
    assert i.fingerprint != j.fingerprint  # different dtype


def test_tensor_metadata_and_names() -> None:
    f = tf.Fusion()
    x = f.input((2, 3), np.float32, name="x")
    y = (x @ x.T).relu()
    y.name = "y"
    assert (y.shape, y.dtype, y.op, y.ndim) == ((2, 2), "f32", "relu", 2)
    assert f.tensor("y").id == y.id
    assert repr(y) == "<Tensor y: f32[2, 2] = relu>"
    f.output(y)
    assert [t.id for t in f.outputs] == [y.id] and [t.id for t in f.inputs] == [x.id]
    with pytest.raises(tf.FusionError, match="already used"):
        x.exp().name = "y"
    with pytest.raises(tf.FusionError, match="not an identifier"):
        f.input((1,), "f32", name="1x")
    with pytest.raises(TypeError, match="no truth value"):
        bool(x > 0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda f: f.input((4, 3), "f32") + f.input((5,), "f32"),
            r"add: cannot broadcast shapes \(4, 3\) and \(5,\)",
        ),
        (
            lambda f: f.input((4, 3), "i32").exp(),
            r"exp: expected a float \(f32, f16, bf16\) operand, got i32",
        ),
        (
            lambda f: f.input((4, 3), "f32") + f.input((4, 3), "i32"),
            "add: operand dtypes differ: f32 and i32",
        ),
        (
            lambda f: f.input((4, 3), "f32") @ f.input((4, 3), "f32"),
            r"matmul: inner dimensions differ: a \(4, 3\) gives k=3, b \(4, 3\) gives k=4",
        ),
        (lambda f: f.input((4, 3), "f32").sum(axis=2), "sum: axis 2 is out of range for rank 2"),
        (lambda f: f.input((4, 3), "f32").reshape(5, -1), r"reshape: cannot reshape \(4, 3\)"),
        (lambda f: f.input((4, 3), "f32").permute(0, 0), "permute: .* is not a permutation"),
        (
            lambda f: f.input((4, 3), "f32").broadcast_to((4, 5)),
            r"broadcast: cannot broadcast shape \(4, 3\) to \(4, 5\)",
        ),
        (lambda f: tf.where(f.input((3,), "f32"), 1.0, 2.0), "where: condition must be bool"),
        (lambda f: f.input((3,), "bool").sum(), "sum: not defined for bool operands"),
        (lambda f: f.input((3, -1), "f32"), "negative extent"),
        (lambda f: f.input((3,), "f64"), 'unknown dtype "f64"'),
    ],
)
def test_errors_name_the_op_and_shapes(build: object, message: str) -> None:
    with pytest.raises(tf.FusionError, match=message) as info:
        build(tf.Fusion())  # type: ignore[operator]
    assert isinstance(info.value, ValueError) and isinstance(info.value, tf.TilefuseError)


def test_mixing_fusions_is_an_error() -> None:
    a, b = tf.Fusion(), tf.Fusion()
    with pytest.raises(tf.FusionError, match="different fusions"):
        a.input((2,), "f32") + b.input((2,), "f32")
    with pytest.raises(TypeError, match="output: expected a Tensor of this fusion, got float"):
        a.output(1.0)  # type: ignore[arg-type]


def test_bad_json_is_a_fusion_error() -> None:
    good = softmax().to_json()
    for text in [
        good[: len(good) // 2],
        '{"version": 1, "nodes": [], "outputs": [3]}',
        good.replace('"max"', '"maxx"'),
        "[]",
    ]:
        with pytest.raises(tf.FusionError, match="invalid fusion JSON"):
            tf.Fusion.from_json(text)


# --- property: any fusion survives JSON with its fingerprint ---------------

UNARY = ["neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "sin"]
BINARY = ["add", "sub", "mul", "div", "max", "min", "pow", "lt", "eq"]


@st.composite
def fusions(draw: st.DrawFn) -> tf.Fusion:
    f = tf.Fusion()
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    pool = [f.input(shape, "f32", name=f"in{i}") for i in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(0, 12))):
        x = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["unary", "binary", "const", "reduce", "layout", "cast"]))
        try:
            if kind == "unary":
                t = getattr(x, draw(st.sampled_from(UNARY)))() if x.dtype == "f32" else -x
            elif kind == "binary":
                t = x._binary(draw(st.sampled_from(BINARY)), draw(st.sampled_from(pool)))
            elif kind == "const":
                t = x * draw(st.floats(allow_nan=True, allow_infinity=True))
            elif kind == "reduce":
                op = draw(st.sampled_from(["sum", "max", "min", "mean"]))
                t = getattr(x, op)(
                    axis=draw(st.sampled_from([None, 0, -1])), keepdims=draw(st.booleans())
                )
            elif kind == "layout":
                t = x.T if draw(st.booleans()) else x.reshape(-1)
            else:
                t = x.astype(draw(st.sampled_from(["f32", "i32", "u32", "bool"])))
        except (tf.FusionError, TypeError):
            continue
        pool.append(t)
    f.output(pool[-1])
    return f


@settings(max_examples=150, deadline=None)
@given(fusions())
def test_any_fusion_round_trips_through_json(f: tf.Fusion) -> None:
    back = tf.Fusion.from_json(f.to_json())
    assert back.fingerprint == f.fingerprint
    assert back == f
    assert str(back) == str(f)
    assert copy.copy(f) == f  # pickling protocol
