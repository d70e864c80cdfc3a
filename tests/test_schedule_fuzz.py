"""Random sequences of schedule primitives on test_fuzz's random fusions:
each call succeeds or raises ``ScheduleError``; whatever the schedule
becomes, its trace replayed as Python rebuilds it, and a kernel that builds
gives the reference's results (a cache_write whose copy back ran after a
reader once gave exp(x) + 1 as 1).

``TILEFUSE_FUZZ_CASES`` sets the number of fusions (a third of them run).
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, note

import tilefuse as tf
from test_fuzz import CASES, SEEDS, Built, check_kernel, fusions, fuzz_settings, judged_on

AXES = ["workgroup.x", "workgroup.y", "invocation.x", "invocation.y"]
SCOPES = ["workgroup", "private", "global"]


def _step(s: tf.Schedule, f: tf.Fusion, rng: random.Random) -> str:
    """One random primitive call on ``s`` (often a wrong one); returns it."""
    block = rng.choice(s.get_blocks())
    loops = s.get_loops(block)
    every = [lp for b in s.get_blocks() for lp in s.get_loops(b)]
    loop = rng.choice(every) if every else None
    calls: dict[str, Any] = {
        "compute_inline": lambda: s.compute_inline(block),
        "reverse_compute_inline": lambda: s.reverse_compute_inline(block),
        "cache_write": lambda: s.cache_write(block, rng.choice(SCOPES)),
        "cache_read": lambda: s.cache_read(
            block, rng.choice([t.name for t in f.inputs]), rng.choice(SCOPES)
        ),
        "set_scope": lambda: s.set_scope(block, rng.choice(SCOPES)),
    }
    if loop is not None:
        calls |= {
            "split": lambda: s.split(loop, [None, rng.choice([1, 2, 3, 4, 8])]),
            "bind": lambda: s.bind(loop, rng.choice(AXES)),
            "parallel": lambda: s.parallel(loop),
            "vectorize": lambda: s.vectorize(loop),
            "unroll": lambda: s.unroll(loop),
            "rfactor": lambda: s.rfactor(loop),
            "compute_at": lambda: s.compute_at(block, loop),
            "reverse_compute_at": lambda: s.reverse_compute_at(block, loop),
        }
    if loops:
        calls["decompose_reduction"] = lambda: s.decompose_reduction(block, rng.choice(loops))
    if len(loops) >= 2:
        calls["reorder"] = lambda: s.reorder(*rng.sample(loops, 2))
        calls["fuse"] = lambda: s.fuse(*loops[:2])
    name = rng.choice(sorted(calls))
    try:
        calls[name]()
    except tf.ScheduleError:
        return f"{name} (refused)"
    return f"{name} {block.name}" + (f" {loop.name}" if loop is not None else "")


def test_random_primitive_sequences_keep_their_meaning(device: tf.Device) -> None:
    @fuzz_settings(max(1, CASES // 3))
    @given(built=fusions(), seed=SEEDS)
    def check(built: Built, seed: int) -> None:
        f = built.fusion
        s = f.create_schedule()
        rng = random.Random(seed)
        calls = [_step(s, f, rng) for _ in range(rng.randint(1, 10)) if s.get_blocks()]
        # The trace replays the failing schedule (`f` is the fusion above).
        note(f"{f}\ncalls {calls}\n{s.trace_as_python()}")
        namespace: dict[str, Any] = {"f": s.recorded_fusion}
        exec(s.trace_as_python(), namespace)
        assert str(namespace["s"]) == str(s)
        try:
            kernel = s.build(device)
        except (tf.ScheduleError, tf.DeviceError):
            return  # a schedule this device cannot run, said so
        if judged_on(built, device):
            check_kernel(built, kernel, seed)

    check()
