"""Shared test helpers: fresh random inputs and the float64 comparison."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import tilefuse as tf

# Relative error bound of f32 kernels against a float64 numpy reference.
RTOL = 1e-5


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator with a fresh seed per test, printed so a failure can be
    replayed with TILEFUSE_TEST_SEED."""
    seed = int(os.environ.get("TILEFUSE_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"{request.node.nodeid}: TILEFUSE_TEST_SEED={seed}")
    return np.random.default_rng(seed)


def assert_close(actual: Any, expected: Any, rtol: float = RTOL) -> None:
    """``actual`` (f32) matches the float64 ``expected`` within ``rtol`` of
    each element, with an absolute floor relative to the largest value so
    that results near zero are judged by the scale of the whole output."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    finite = np.abs(expected[np.isfinite(expected)])
    scale = float(finite.max()) if finite.size else 0.0
    np.testing.assert_allclose(
        actual.astype(np.float64), expected, rtol=rtol, atol=rtol * max(scale, 1e-30)
    )


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def gpu() -> tf.Device:
    """The GPU device. In CI a missing adapter fails the test: CI runs
    every GPU test on Mesa's lavapipe. Elsewhere the test is skipped."""
    try:
        return tf.Device.gpu()
    except tf.DeviceError as exc:
        if in_ci():
            pytest.fail(f"CI needs a GPU adapter (install mesa-vulkan-drivers): {exc}")
        pytest.skip(f"no GPU adapter: {exc}")  # outside CI only: CI failed just above


@pytest.fixture(params=["cpu", "gpu"])
def device(request: pytest.FixtureRequest) -> tf.Device:
    """Each device in turn: the CPU, then the GPU (see ``gpu``)."""
    if request.param == "cpu":
        return tf.Device.cpu()
    return request.getfixturevalue("gpu")  # type: ignore[no-any-return]
