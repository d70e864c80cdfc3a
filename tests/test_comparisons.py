"""Float comparisons and casts to bool follow IEEE 754 (numpy) on every
device: a comparison with NaN is False except ``!=``, which is True, and
``bool(NaN)`` is True (docs/semantics.md). WGSL's ``!=`` is False for NaN on
Vulkan, so the GPU spells comparisons out (``shaders/math.wgsl``)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tilefuse as tf

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3e38, -1e-45], np.float32)

COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


def _pairs(repeat: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special values, ``repeat`` times over (4096 elements
    and more take the GPU's vec4 loops)."""
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    return np.tile(a.ravel(), repeat), np.tile(b.ravel(), repeat)


def _of_two(shape: tuple[int, ...], body: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]) -> tf.Fusion:
    """A fusion of two inputs of ``shape`` whose output is ``body`` of them."""
    f = tf.Fusion()
    f.output(body(f.input(shape, "f32"), f.input(shape, "f32")))
    return f


@pytest.mark.parametrize("op", sorted(COMPARISONS))
@pytest.mark.parametrize("repeat", [1, 64], ids=["scalar", "vectorized"])
def test_comparisons_of_special_values_are_numpys(device: tf.Device, op: str, repeat: int) -> None:
    a, b = _pairs(repeat)
    f = _of_two(a.shape, lambda x, y: COMPARISONS[op](x, y))
    want = COMPARISONS[op](a, b)
    np.testing.assert_array_equal(f.execute(a, b, device=device), want)
    np.testing.assert_array_equal(f.evaluate(a, b), want)


@pytest.mark.parametrize("op", sorted(COMPARISONS))
@pytest.mark.parametrize("repeat", [1, 64], ids=["scalar", "vectorized"])
def test_comparisons_as_masks_are_numpys(device: tf.Device, op: str, repeat: int) -> None:
    """A comparison that only chooses (``where``): the vec4 path's masks."""
    a, b = _pairs(repeat)
    f = _of_two(a.shape, lambda x, y: tf.where(COMPARISONS[op](x, y), x * 2.0, y + 1.0))
    with np.errstate(all="ignore"):
        want = np.where(COMPARISONS[op](a, b), a * 2, b + 1)
    np.testing.assert_array_equal(f.execute(a, b, device=device), want)


@pytest.mark.parametrize("op", sorted(COMPARISONS))
@pytest.mark.parametrize("constant", [np.nan, 0.0, -0.0, np.inf])
def test_comparisons_with_a_literal_are_numpys(device: tf.Device, op: str, constant: float) -> None:
    f = tf.Fusion()
    x = f.input(SPECIAL.shape, "f32")
    f.output(COMPARISONS[op](x, f.constant(constant)), COMPARISONS[op](f.constant(constant), x))
    got = f.execute(SPECIAL, device=device)
    c = np.float32(constant)
    np.testing.assert_array_equal(got[0], COMPARISONS[op](SPECIAL, c))
    np.testing.assert_array_equal(got[1], COMPARISONS[op](c, SPECIAL))


@pytest.mark.parametrize("repeat", [1, 512], ids=["scalar", "vectorized"])
def test_casts_to_bool_are_numpys(device: tf.Device, repeat: int) -> None:
    a = np.tile(SPECIAL, repeat)
    f = tf.Fusion()
    x = f.input(a.shape, "f32")
    f.output(x.astype("bool"), (x * 0.5).astype("bool"), x.astype("bool").astype("f32"))
    got = f.execute(a, device=device)
    np.testing.assert_array_equal(got[0], a.astype(bool))
    np.testing.assert_array_equal(got[1], (a * np.float32(0.5)).astype(bool))
    np.testing.assert_array_equal(got[2], a.astype(bool).astype(np.float32))


def test_a_random_fusion_the_fuzz_found_is_right_on_every_device(device: tf.Device) -> None:
    """``ne(min(log(t), t), t)``: NaN wherever ``t < 0``, so half its
    elements compare NaN (1034 of 2112 were wrong on lavapipe)."""
    t = np.random.default_rng(0).standard_normal(2112).astype(np.float32)
    f = tf.Fusion()
    x = f.input(t.shape, "f32")
    f.output(x.log().minimum(x) != x)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.minimum(np.log(t), t) != t
    np.testing.assert_array_equal(f.execute(t, device=device), want)


def test_a_comparison_with_a_nan_literal_folds_before_the_driver(device: tf.Device) -> None:
    """``x == NaN`` is False whatever ``x``: the driver found that through
    the NaN test and folded ``False * inf`` to 0 (IEEE: NaN)."""
    f = tf.Fusion()
    x, y = f.input((4,), "f32"), f.input((4,), "f32")
    nan = f.constant(np.nan)
    f.output((x == nan).astype("f32") * y, (nan != x).astype("f32") * y)
    a = np.array([1.0, np.nan, 0.0, np.inf], np.float32)
    b = np.array([np.inf, -np.inf, np.nan, 2.0], np.float32)
    got = f.execute(a, b, device=device)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got[0], np.float32(0.0) * b)
        np.testing.assert_array_equal(got[1], b)


def test_a_comparison_of_a_value_with_itself_folds_before_the_driver(device: tf.Device) -> None:
    """``x < x`` is False whatever ``x``; the driver found that and folded
    ``False * inf`` to 0 (IEEE: NaN)."""
    f = tf.Fusion()
    x, y = f.input((4,), "f32"), f.input((4,), "f32")
    f.output((x < x).astype("f32") * y, (x > x).astype("f32") * y)
    a = np.array([1.0, np.nan, 0.0, np.inf], np.float32)
    b = np.array([np.inf, -np.inf, np.nan, 2.0], np.float32)
    with np.errstate(invalid="ignore"):
        for got in f.execute(a, b, device=device):
            np.testing.assert_array_equal(got, np.float32(0.0) * b)
