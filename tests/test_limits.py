"""Inputs at the edges of what tilefuse takes: fusions thousands of ops
deep, params whose unrolls dwarf the fusion, and wrong arguments at every
schedule primitive and params field. Each gets the reference's answer or
the library's exception naming the problem, in bounded time: never a
crash, a hang or Python's own OverflowError / TypeError.

``TILEFUSE_FUZZ_CASES`` sets the number of cases of the property tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import tilefuse as tf
from test_fuzz import CASES, fuzz_settings


def _chain(n: int, shape: tuple[int, ...] = (64,)) -> tf.Fusion:
    """``n`` rounds of ``abs(y) - 0.25`` and ``tanh(y * 0.5 + x)``
    (7 ops a pair)."""
    f = tf.Fusion()
    x = f.input(shape, "f32", name="x")
    y = x
    for i in range(n):
        y = (y * 0.5 + x).tanh() if i % 2 else y.abs() - 0.25
    f.output(y)
    return f


@pytest.mark.parametrize("rounds", [100, 3000])
def test_deep_fusions_match_the_reference(device: tf.Device, rounds: int) -> None:
    """3000 rounds are 10,500 ops, one expression that deep if inlined
    whole (a SIGSEGV once)."""
    f = _chain(rounds)
    a = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    a[:4] = [np.nan, np.inf, -0.0, 0.0]
    np.testing.assert_allclose(f.execute(a, device=device), f.evaluate(a), rtol=1e-5, atol=1e-6)


def test_deep_fusions_under_a_reduction_match_the_reference(device: tf.Device) -> None:
    f = tf.Fusion()
    x = f.input((8, 32), "f32", name="x")
    y = x
    for _ in range(400):
        y = (y * 0.5 + x).tanh()
    f.output(y.sum(axis=1))
    a = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    np.testing.assert_allclose(f.execute(a, device=device), f.evaluate(a), rtol=1e-5, atol=1e-5)


def test_a_hand_inline_past_the_depth_bound_is_refused() -> None:
    f = _chain(200)
    s = f.create_schedule()
    with pytest.raises(tf.ScheduleError, match="past the limit of 256"):
        for block in s.get_blocks():
            s.compute_inline(block)


POINTWISE_EXTREMES = st.fixed_dictionaries(
    {
        "unroll_factor_inner": st.sampled_from([1, 2, 16]),
        "unroll_factor_outer": st.sampled_from([1, 5, 16]),
        "vectorization_factor": st.sampled_from([1, 2, 4]),
        "break_point": st.sampled_from([0, 1, 2]),
        "split_block": st.booleans(),
        "launch": st.fixed_dictionaries(
            {"workgroup_size": st.sampled_from([None, [1, 1, 1], [32, 1, 1], [1024, 1, 1]])}
        ),
    }
)


def test_extreme_pointwise_params_on_tiny_fusions_answer_in_seconds(device: tf.Device) -> None:
    """Every unroll and vector width the params admit, on fusions of under
    1,000 elements: the reference's answer or a ParamsError, and the
    schedule, build and first run within seconds (117 s once, before
    unrolls were clamped to their loops)."""

    @fuzz_settings(max(1, CASES // 5))
    @given(
        shape=st.sampled_from([(3, 5, 24), (1, 7, 1), (2, 2, 2), (31,), (4, 0, 3)]),
        changes=POINTWISE_EXTREMES,
    )
    def check(shape: tuple[int, ...], changes: dict[str, Any]) -> None:
        f = tf.Fusion()
        x, y = f.input(shape, "f32", name="x"), f.input(shape, "f32", name="y")
        f.output(((x * y).exp() - x).tanh() + y.relu())
        rng = np.random.default_rng(3)
        a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        params = f.heuristics(device=device).to_dict() | changes
        note(f"{shape} {changes}")
        start = time.perf_counter()
        try:
            got = f.schedule(params, device)(a, b)
        except tf.ParamsError:
            return
        assert time.perf_counter() - start < 40.0
        np.testing.assert_allclose(got, f.evaluate(a, b), rtol=1e-5, atol=1e-6)

    check()


# --- wrong arguments ------------------------------------------------------------

BAD_VALUES = st.sampled_from([-3, -1, 2**40, 2**70, None, "2", 1.5, True, [1], {}])


def _primitives(s: tf.Schedule, value: Any) -> dict[str, Callable[[], Any]]:
    """Each primitive called with ``value`` in the place of one argument."""
    block = s.get_block("e")
    loop = s.get_loops(block)[1]
    return {
        "split factor": lambda: s.split(loop, [None, value]),
        "split factors": lambda: s.split(loop, value),
        "split names": lambda: s.split(loop, [None, 4], names=value),
        "pipeline stages": lambda: s.pipeline(loop, stages=value),
        "pipeline prefetch_gap": lambda: s.pipeline(loop, prefetch_gap=value),
        "bind axis": lambda: s.bind(loop, value),
        "bind loop": lambda: s.bind(value, "invocation.x"),
        "fuse": lambda: s.fuse(loop, value),
        "reorder": lambda: s.reorder(value),
        "parallel": lambda: s.parallel(value),
        "vectorize": lambda: s.vectorize(value),
        "unroll": lambda: s.unroll(value),
        "rfactor": lambda: s.rfactor(value),
        "get_block": lambda: s.get_block(value),
        "get_loops": lambda: s.get_loops(value),
        "compute_at block": lambda: s.compute_at(value, loop),
        "compute_at loop": lambda: s.compute_at(block, value),
        "reverse_compute_at": lambda: s.reverse_compute_at(block, value),
        "decompose_reduction": lambda: s.decompose_reduction(value, loop),
        "cache_read buffer": lambda: s.cache_read(block, value, "workgroup"),
        "cache_read scope": lambda: s.cache_read(block, "x", value),
        "cache_write": lambda: s.cache_write(block, value),
        "set_scope": lambda: s.set_scope(block, value),
        "compute_inline": lambda: s.compute_inline(value),
        "compute_inline_all": lambda: s.compute_inline_all(value),
        "reverse_compute_inline": lambda: s.reverse_compute_inline(value),
    }


def test_every_primitive_names_a_bad_argument() -> None:
    f = tf.Fusion()
    x = f.input((64, 1000), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    e.name = "e"
    f.output(e / e.sum(axis=1, keepdims=True))
    names = sorted(_primitives(f.create_schedule(), None))

    @fuzz_settings(max(len(names), CASES))
    @given(name=st.sampled_from(names), value=BAD_VALUES)
    def check(name: str, value: Any) -> None:
        if (name, value) == ("split names", None):
            return  # the default: names chosen for you
        call = _primitives(f.create_schedule(), value)[name]
        with pytest.raises(tf.ScheduleError) as err:
            call()
        note(str(err.value))
        assert str(err.value)

    check()


def _field_paths(params: tf.ParamsStruct, prefix: str = "") -> list[str]:
    out = []
    for name in type(params).fields():
        value = getattr(params, name)
        out.append(prefix + name)
        if isinstance(value, tf.ParamsStruct):
            out += _field_paths(value, f"{prefix}{name}.")
    return out


@pytest.mark.parametrize("cls", [tf.PointwiseParams, tf.ReductionParams, tf.MatmulParams])
def test_every_params_field_names_a_bad_value(cls: type[tf.ParamsStruct]) -> None:
    paths = _field_paths(cls())

    @fuzz_settings(max(len(paths), CASES))
    @given(path=st.sampled_from(paths), value=BAD_VALUES)
    def check(path: str, value: Any) -> None:
        p = cls()
        *outer, last = path.split(".")
        target = p
        for name in outer:
            target = getattr(target, name)
        before = p.to_dict()
        try:
            setattr(target, last, value)
        except tf.ParamsError as e:
            assert e.path.startswith(path), (e.path, path)
            assert p.to_dict() == before  # a refused write changes nothing
        else:  # a value the field takes (None where it is derived, say)
            assert cls.from_dict(p.to_dict()) == p

    check()
