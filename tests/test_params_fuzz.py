"""The property tests for params a user (or the tuner) picks: a built-in
reduction workload of random sizes, or a random fusion of ``test_fuzz``
(special values, empty and size-1 dimensions, any axes), scheduled with a
random point of its scheduler's tunable fields, gives the reference's
result on the CPU and the GPU, or is refused with ``ParamsError`` before
anything runs; and what the tuner picks for a random fusion runs right.

``TILEFUSE_PARAMS_FUZZ_CASES`` sets the number of cases (CI runs the
default, with a fixed sequence of examples; raise it to search further).
"""

from __future__ import annotations

import copy
import os
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

import tilefuse as tf
from test_fuzz import SEEDS, Built, check_kernel, fusions, fuzz_settings, judged_on

CASES = int(os.environ.get("TILEFUSE_PARAMS_FUZZ_CASES", "40"))
#: Random fusions tuned (a few trials each).
TUNED = max(1, CASES // 4)

WORKLOADS = ["softmax", "layernorm", "rmsnorm", "log_softmax", "row_sum", "column_sum"]

#: Random points drawn per case until one schedules (most combinations of
#: every field are refused: a workgroup too small for its reduction
#: invocations, subgroup flags without subgroups, ...).
DRAWS = 200


def random_point(
    f: tf.Fusion, device: tf.Device, rng: random.Random
) -> tuple[Any, tf.Kernel | tf.SegmentedKernel] | None:
    """A random combination of the tunable fields that schedules, as a
    params dict (a list of them, one per segment, for a segmented fusion),
    with its kernel; None when DRAWS tries found none."""
    segmented = isinstance(f.heuristics(device=device, cache=False), list)
    parts = [s.fusion for s in f.segments()] if segmented else [f]
    spaces = []
    for part in parts:
        base = part.heuristics(device=device, cache=False)
        assert isinstance(base, tf.HeuristicParams)
        spaces.append((base.to_dict(), part.tunables(device=device)[1]))
    for _ in range(DRAWS):
        points = [_draw(base, fields, rng) for base, fields in spaces]
        params = points if segmented else points[0]
        try:
            return params, f.schedule(params, device)
        except tf.ParamsError:
            continue
    return None


def _draw(base: dict[str, Any], fields: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
    """``base`` with each tunable field set to a random value of its own."""
    p = copy.deepcopy(base)
    for field in fields:
        *outer, last = field["path"].split(".")
        node = p
        for key in outer:
            node = node[key]
        node[last] = rng.choice(field["values"])
    return p


def test_random_reduction_params_match_the_reference(device: tf.Device) -> None:
    @fuzz_settings(CASES)
    @given(
        name=st.sampled_from(WORKLOADS),
        rows=st.sampled_from([1, 2, 3, 7, 33, 64]),
        cols=st.sampled_from([1, 5, 32, 100, 257]),
        seed=SEEDS,
    )
    def check(name: str, rows: int, cols: int, seed: int) -> None:
        w = tf.workloads.get(name, rows=rows, cols=cols)
        f = w.fusion()
        point = random_point(f, device, random.Random(seed))
        if point is None:
            return
        p, kernel = point
        note(f"{name} {rows}x{cols} params {p}")
        inputs = w.inputs(seed=seed % 1000)
        got = kernel(*inputs)
        want = w.reference(*inputs)
        got, want = (got, want) if isinstance(got, list) else ([got], [want])
        for g, r in zip(got, want, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * float(np.abs(r).max()))

    check()


@pytest.mark.parametrize("op", ["sum", "max"])
def test_reductions_with_empty_outputs_build_at_random_points(device: tf.Device, op: str) -> None:
    """Found by this file's fuzzing: on the GPU, points that unroll the kept
    axes of a reduction whose output is empty indexed the one-element
    stand-in of its empty workgroup buffer past its end with a constant,
    which naga rejected as an internal error."""
    f = tf.Fusion()
    f.output(getattr(f.input((1, 0, 0, 2), "f32"), op)(axis=1))
    base = f.heuristics(device=device, cache=False)
    assert isinstance(base, tf.HeuristicParams)
    fields, rng = f.tunables(device=device)[1], random.Random(5)
    # The point the fuzzer found: its unrolled axis of 2 became `let l = 1u;`.
    found = base.to_dict() | {
        "cross_invocation_outer_reduction": True,
        "unroll_factor_reduction": 8,
        "vectorization_factor_iteration": 2,
        "rows_per_workgroup": 16,
        "reduction_invocations": 64,
    }
    points = [found] + [_draw(base.to_dict(), fields, rng) for _ in range(1000)]
    x = np.zeros((1, 0, 0, 2), np.float32)
    built = 0
    for p in points:
        try:
            kernel = f.schedule(p, device)
        except tf.ParamsError:
            continue
        assert kernel(x).shape == (1, 0, 2)
        built += 1
    assert built >= 10


def test_random_fusions_with_random_params_match_the_reference(device: tf.Device) -> None:
    @fuzz_settings(CASES)
    @given(built=fusions(), seed=SEEDS)
    def check(built: Built, seed: int) -> None:
        f = built.fusion
        assume(judged_on(built, device))
        point = random_point(f, device, random.Random(seed))
        assume(point is not None)
        assert point is not None
        p, kernel = point
        note(f"{f}\nsteps {built.steps}\nparams {p}")
        check_kernel(built, kernel, seed)

    check()


def test_tuning_random_fusions_gives_winners_that_match_the_reference(device: tf.Device) -> None:
    @fuzz_settings(TUNED)
    @given(built=fusions(), seed=SEEDS)
    def check(built: Built, seed: int) -> None:
        f = built.fusion
        assume(judged_on(built, device))
        note(f"{f}\nsteps {built.steps}")
        r = tf.tune(f, device, trials=4, seed=seed % 100, cache=False, progress=False)
        note(f"winner {r.best_params}")
        check_kernel(built, f.schedule(r.best_params, device), seed)

    check()
