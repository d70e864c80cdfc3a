"""The autotuner and the heuristic cache from Python: tuning writes an
entry that a fresh process's heuristics() returns (and another device
does not), concurrent and killed writers lose nothing, a corrupt entry is
a warning, and a tuned kernel still matches numpy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilefuse as tf
from conftest import assert_close


def softmax(rows: int = 32, cols: int = 128) -> tf.Fusion:
    f = tf.Fusion()
    x = f.input((rows, cols), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    f.output(e / e.sum(axis=1, keepdims=True))
    return f


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )


def test_tuning_finds_params_that_run_right_and_never_lose(
    device: tf.Device, rng: np.random.Generator, tmp_path: Path
) -> None:
    f = softmax()
    r = tf.tune(f, device, trials=8, seed=1, cache=False, progress=False)
    assert r.default_time is not None and r.best_time <= r.default_time
    assert r.speedup is not None and r.speedup >= 1.0
    assert r.trials[0].origin == "default"
    statuses = {t.status for t in r.trials}
    assert statuses <= {"ok", "failed", "wrong", "duplicate", "cut"}
    assert "wrong" not in statuses, [t for t in r.trials if t.status == "wrong"]
    x = rng.standard_normal((32, 128)).astype(np.float32)
    assert isinstance(r.best_params, tf.HeuristicParams)
    assert_close(f.schedule(r.best_params, device)(x), f.evaluate(x))
    assert json.loads(r.to_json())["best_time"] == r.best_time
    r.plot(str(tmp_path / "tune.png"))
    assert (tmp_path / "tune.png").stat().st_size > 0


def test_a_tuned_entry_serves_a_fresh_process_and_only_its_device(tmp_path: Path) -> None:
    env = {"TILEFUSE_CACHE": str(tmp_path)}
    script = """
        import tilefuse as tf
        f = tf.Fusion()
        x = f.input((32, 128), "f32", name="x")
        e = (x - x.max(axis=1, keepdims=True)).exp()
        f.output(e / e.sum(axis=1, keepdims=True))
        d = tf.Device.cpu()
        {body}
    """
    tuned = _run(
        script.format(
            body="r = tf.tune(f, d, trials=6, seed=2, progress=False)\n"
            "        print(r.best_params.to_json())"
        ),
        env,
    ).stdout
    fresh = _run(
        script.format(body="print(f.heuristics(device=d).to_json()); print(f.params_source(d))"),
        env,
    ).stdout
    assert json.loads(tuned) == json.loads(fresh.split("\n")[0])
    assert "cache: " in fresh
    # Another device fingerprint (here: another thread count) misses.
    other = _run(
        script.format(body="print(f.params_source(d)); print(tf.cache.explain(f, d))"),
        {**env, "TILEFUSE_NUM_THREADS": "1"},
    ).stdout
    assert other.startswith("default heuristic"), other
    assert "device.cores" in other


def test_params_source_says_a_winner_was_tuned_over_another_space(own_cache: Path) -> None:
    f, d = softmax(), tf.Device.cpu()
    _, fields = f.tunables(device=d)
    tf.tune(f, d, trials=3, seed=1, progress=False, fields=[fields[0]["path"]])
    assert "over another params space" in f.params_source(d)
    tf.cache.clear()
    tf.tune(f, d, trials=3, seed=1, progress=False)
    source = f.params_source(d)
    assert source.startswith("cache: ") and "another" not in source, source


def test_eight_processes_writing_one_cache_keep_every_entry(tmp_path: Path) -> None:
    writer = """
        import sys, tilefuse as tf
        d = tf.Device.cpu()
        me = int(sys.argv[1])
        for n in range(1, 13):
            f = tf.Fusion()
            x = f.input((n * 8,), "f32")
            f.output(x.exp())
            p = f.heuristics(device=d, cache=False).to_dict()
            tf.cache.store(f, d, p, 1e-3 * (1 + (me * 5 + n) % 8), trials=1)
    """
    env = {**os.environ, "TILEFUSE_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(writer), str(i)], env=env)
        for i in range(8)
    ]
    assert all(p.wait() == 0 for p in procs)
    entries, warnings = tf._native.cache_entries(str(tmp_path))
    assert not warnings
    assert len(entries) == 12
    assert all(e["best_time"] == pytest.approx(1e-3) for e in entries), "the fastest stays"


def test_writers_killed_mid_write_leave_no_corrupt_or_lost_entry(tmp_path: Path) -> None:
    writer = """
        import tilefuse as tf
        d = tf.Device.cpu()
        f = tf.Fusion()
        x = f.input((64,), "f32")
        f.output(x.exp())
        p = f.heuristics(device=d, cache=False).to_dict()
        t = 1.0
        while True:
            t *= 0.999
            tf.cache.store(f, d, p, t, trials=1)
    """
    env = {**os.environ, "TILEFUSE_CACHE": str(tmp_path)}
    rng = np.random.default_rng(0)
    for _ in range(10):
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(writer)], env=env)
        try:
            p.wait(timeout=0.3 + 0.5 * float(rng.random()))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
        entries, warnings = tf._native.cache_entries(str(tmp_path))
        assert not warnings, warnings
        assert len(entries) <= 1
    assert len(tf._native.cache_entries(str(tmp_path))[0]) == 1


def test_a_corrupt_entry_is_a_warning_and_tuning_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = softmax(8, 64)
    d = tf.Device.cpu()
    monkeypatch.setenv("TILEFUSE_CACHE", str(tmp_path))
    tf.tune(f, d, trials=2, seed=3, progress=False)
    (entry,) = list(tmp_path.glob("*.json"))
    entry.write_text("{ this is not json")
    with pytest.warns(RuntimeWarning, match="not a valid entry"):
        source = f.params_source(d)
    assert source == "default heuristic"
    assert list(tmp_path.glob("*.corrupt-*")), "the file is set aside"
    tf.tune(f, d, trials=2, seed=3, progress=False)
    assert f.params_source(d).startswith("cache: ")


def _tuned_softmax(cache: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[tf.Fusion, tf.Device]:
    """A small softmax tuned on the CPU into the cache directory ``cache``."""
    f, d = softmax(8, 64), tf.Device.cpu()
    monkeypatch.setenv("TILEFUSE_CACHE", str(cache))
    tf.tune(f, d, trials=2, seed=3, progress=False)
    return f, d


def test_an_edited_entry_is_completed_and_a_wrong_one_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f, d = _tuned_softmax(tmp_path, monkeypatch)
    (path,) = list(tmp_path.glob("*.json"))
    entry = json.loads(path.read_text())
    del entry["params"]["unroll_factor_reduction"]  # left out: takes its default
    path.write_text(json.dumps(entry))
    served = f.heuristics(device=d)
    assert served.to_dict() == tf.HeuristicParams.from_dict(entry["params"]).to_dict()
    entry["params"]["unroll_factor_reduction"] = -3
    path.write_text(json.dumps(entry))
    with pytest.raises(tf.ParamsError, match="unroll_factor_reduction"):
        f.heuristics(device=d)


def test_a_served_entry_is_read_again_only_when_its_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f, d = _tuned_softmax(tmp_path, monkeypatch)
    first = f.heuristics(device=d)
    assert isinstance(first, tf.ReductionParams)
    tuned = first.unroll_factor_reduction
    first.unroll_factor_reduction = tuned + 1  # the caller's copy, not the served one
    assert f.heuristics(device=d).unroll_factor_reduction == tuned
    (path,) = list(tmp_path.glob("*.json"))
    entry = json.loads(path.read_text())
    entry["params"]["unroll_factor_reduction"] = edited = tuned + 2
    tmp = path.with_suffix(".edited")
    tmp.write_text(json.dumps(entry, indent=4))
    tmp.replace(path)  # as an editor saves: a new file renamed into place
    again = f.heuristics(device=d)
    assert isinstance(again, tf.ReductionParams) and again.unroll_factor_reduction == edited
    path.unlink()
    assert f.params_source(d) == "default heuristic"


def test_tuning_starts_from_the_cached_winners_of_the_same_structure(own_cache: Path) -> None:
    d = tf.Device.cpu()
    small = softmax(8, 64)
    tuned = small.heuristics(device=d).to_dict()
    tuned.update(unroll_factor_reduction=4, vectorization_factor_reduction=2)
    tf.cache.store(small, d, tuned, 1e-6)

    def tuned(f: tf.Fusion, cache: bool = True) -> tf.TuneResult:
        return tf.tune(f, d, trials=2, seed=5, cache=cache, progress=False)

    def first_tried(f: tf.Fusion, cache: bool = True) -> tf.Trial:
        return tuned(f, cache).trials[1]

    r = tuned(softmax(16, 256))
    warm = r.trials[1]
    assert warm.origin == "warm_start" and r.warm_start == [warm]
    assert isinstance(r.best_params, tf.HeuristicParams)
    assert r.warm_start_won == (r.best_params.to_dict() == warm.params)
    assert warm.params["unroll_factor_reduction"] == 4
    assert warm.params["vectorization_factor_reduction"] == 2
    assert warm.status in ("ok", "cut")  # measured
    # Another structure, or no cache, starts cold.
    assert first_tried(softmax(16, 256), cache=False).origin != "warm_start"
    log_softmax = tf.workloads.get("log_softmax", rows=16, cols=256).fusion()
    assert first_tried(log_softmax).origin != "warm_start"


def test_progress_shows_a_status_line(capsys: pytest.CaptureFixture[str]) -> None:
    tf.tune(softmax(8, 64), tf.Device.cpu(), trials=3, cache=False, progress=True)
    err = capsys.readouterr().err
    assert "tuning: " in err and "best " in err


def test_a_raising_progress_callback_stops_tuning() -> None:
    def stop(trial: dict[str, Any], best: float | None) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tf._native.tune(softmax(8, 64)._native, tf.Device.cpu()._native, {"trials": 5}, stop)


def _pointwise_chain() -> tf.Fusion:
    f = tf.Fusion()
    x = f.input((64, 256), "f32", name="x")
    f.output(((x * 0.5).tanh() + 1.0).exp())
    return f


@pytest.fixture
def registry() -> Any:
    """Removes the heuristics a test registers."""
    before = {h.name for h in tf.heuristic.registered()}
    yield
    for h in tf.heuristic.registered():
        if h.name not in before:
            tf.heuristic.unregister(h)


def test_a_registered_seed_heuristic_is_used_and_recorded(registry: Any, tmp_path: Path) -> None:
    asked: list[dict[str, Any]] = []

    class Unrolled(tf.AutotunerHeuristic):
        name = "test_unrolled"
        schedulers = ("pointwise",)

        @classmethod
        def is_eligible(cls, fusion: tf.Fusion, device: tf.Device) -> bool:
            return bool(fusion.features()["compute_ops"] >= 3)

        @classmethod
        def seed_configs(cls, fusion: tf.Fusion, device: tf.Device) -> list[Any]:
            p = fusion.heuristics(device=device, cache=False)
            assert isinstance(p, tf.HeuristicParams)
            p.unroll_factor_outer = 4
            return [p]

        @classmethod
        def neighbors(cls, params: Any, fusion: tf.Fusion, device: tf.Device) -> list[Any]:
            asked.append(params.to_dict())
            return [{**params.to_dict(), "unroll_factor_inner": 2}]

    class NotForMatmuls(tf.AutotunerHeuristic):
        name = "test_matmul_only"
        schedulers = ("matmul",)

        @classmethod
        def is_eligible(cls, fusion: tf.Fusion, device: tf.Device) -> bool:
            raise AssertionError("never asked: the fusion is not a matmul")

    f = _pointwise_chain()
    d = tf.Device.cpu()
    r = tf.tune(f, d, trials=4, strategy="random", seed=0, progress=False)
    assert [(t.origin, t.heuristic) for t in r.trials[:3]] == [
        ("default", None),
        ("seed", "test_unrolled"),
        ("heuristic_neighbor", "test_unrolled"),
    ]
    assert asked, "neighbors() was asked about the best params"
    mine = next(h for h in r.heuristics if h["name"] == "test_unrolled")
    assert mine["seeds"] == [r.trials[1].params]
    assert mine["won"] == (r.best_params.to_dict() == r.trials[1].params)
    entry = tf.cache.lookup(f, d)
    assert entry is not None and "test_unrolled" in entry["heuristics"]
    assert "test_unrolled" in json.loads(r.to_json())["heuristics"][0]["name"]


def test_a_raising_seed_heuristic_is_skipped_with_a_warning(registry: Any) -> None:
    class Raises(tf.AutotunerHeuristic):
        name = "test_raises"

        @classmethod
        def is_eligible(cls, fusion: tf.Fusion, device: tf.Device) -> bool:
            return True

        @classmethod
        def seed_configs(cls, fusion: tf.Fusion, device: tf.Device) -> list[Any]:
            raise ValueError("out of ideas")

    class BadSeed(tf.AutotunerHeuristic):
        name = "test_bad_seed"

        @classmethod
        def is_eligible(cls, fusion: tf.Fusion, device: tf.Device) -> bool:
            return True

        @classmethod
        def seed_configs(cls, fusion: tf.Fusion, device: tf.Device) -> list[Any]:
            return [{"scheduler": "pointwise", "vectorization_factor": 3}]

    with pytest.warns(RuntimeWarning) as caught:
        r = tf.tune(_pointwise_chain(), tf.Device.cpu(), trials=2, cache=False, progress=False)
    messages = [str(w.message) for w in caught]
    assert any("'test_raises'" in m and "out of ideas" in m for m in messages), messages
    assert any("'test_bad_seed'" in m and "vectorization_factor" in m for m in messages), messages
    assert r.default_time is not None
    assert not {h["name"] for h in r.heuristics} & {"test_raises", "test_bad_seed"}


def test_a_heuristic_needs_a_name() -> None:
    with pytest.raises(TypeError, match="needs a class attribute `name`"):

        class Nameless(tf.AutotunerHeuristic):
            pass


def test_builtin_heuristics_seed_short_rows_on_the_gpu(device: tf.Device) -> None:
    f = softmax(256, 128)
    r = tf.tune(f, device, trials=6, seed=0, cache=False, progress=False)
    names = {h["name"] for h in r.heuristics}
    assert ("short_rows" in names) == device.is_gpu
    seeds = [t for t in r.trials if t.origin == "seed"]
    assert all(t.status in ("ok", "duplicate", "cut") for t in seeds), seeds
    plain = tf.tune(f, device, trials=2, cache=False, progress=False, builtin_heuristics=False)
    assert plain.heuristics == []


def test_an_injected_wrong_candidate_is_disqualified(device: tf.Device) -> None:
    f = softmax()
    options = {"trials": 3, "repeat": 1, "corrupt_trial": 1, "strategy": "random"}
    r = tf._native.tune(f._native, device._native, options)
    wrong = r["trials"][1]
    assert wrong["status"] == "wrong" and "output 0: element" in wrong["error"]
    assert r["best_params"] != wrong["params"] or r["trials"][0]["params"] == wrong["params"]


def test_a_fusion_that_runs_as_one_segment_tunes_to_a_list() -> None:
    # No scheduler returns an input beside a matmul: one segment, and the
    # input copied by the caller.
    cpu = tf.Device.cpu()
    f = tf.Fusion()
    a, b = f.input((8, 4), "f32"), f.input((4, 8), "f32")
    f.output(a @ b, a)
    assert [s.scheduler for s in f.segments()] == ["matmul"]
    r = tf.tune(f, cpu, trials=2, cache=False, progress=False)
    assert isinstance(r.best_params, list) and len(r.best_params) == 1
    x, y = np.random.default_rng(2).random((8, 4), np.float32), np.ones((4, 8), np.float32)
    product, copy = f.schedule(r.best_params, cpu)(x, y)
    np.testing.assert_allclose(product, x.astype(np.float64) @ y, rtol=1e-5)
    np.testing.assert_array_equal(copy, x)


def test_each_trial_counts_the_launches_it_made() -> None:
    r = tf.tune(softmax(8, 64), tf.Device.cpu(), trials=6, seed=1, cache=False, progress=False)
    for t in r.trials:
        if t.status in ("ok", "cut"):
            assert t.launches >= 2, t  # its check and its probe at least
        elif t.status == "duplicate":
            assert t.launches == 0, t  # the earlier trial's time
    assert sum(t.launches for t in r.trials) > 0
