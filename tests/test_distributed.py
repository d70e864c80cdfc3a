"""Tuning on Ray workers: the same winner as in process on a recorded space,
a killed worker's candidate measured by another with nothing lost or
measured twice, one cache entry per device fingerprint, and a run that
died resumed from its journal."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tilefuse as tf
from conftest import ScaledReference, ray_or_skip
from tilefuse.cli import main
from tilefuse.distributed import RayExecutor, RayGroup, Worker
from tilefuse.journal import Journal
from tilefuse.replay import record

ray = ray_or_skip()

FIELDS = ["reduction_invocations", "unroll_factor_reduction"]


def softmax(rows: int, cols: int) -> tf.Fusion:
    return tf.workloads.get("softmax", rows=rows, cols=cols).payload


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    # Logical CPUs: workers reserve their threads, more than this VM has.
    # A new local cluster, never one `ray start` left running here.
    ray.init(address="local", num_cpus=8, log_to_driver=False, include_dashboard=False)
    yield
    ray.shutdown()


def assert_nothing_lost_or_twice(r: tf.TuneResult) -> None:
    ids = [t.id for t in r.trials]
    assert ids == list(range(len(ids)))
    measured = [str(t.params) for t in r.trials if t.status != "duplicate"]
    assert len(measured) == len(set(measured)), "a candidate was measured twice"


def test_two_workers_find_the_local_winner_on_a_recorded_space() -> None:
    f = softmax(16, 64)
    local = tf.Device.cpu()
    recording = record(f, local, FIELDS)
    with RayExecutor([Worker("cpu", local.info["cores"])] * 2) as ex:
        ((fingerprint, (remote, _)),) = ex.groups().items()
        assert fingerprint == local.fingerprint and remote.info == local.info
        kw = {"strategy": "exhaustive", "trials": 1000, "fields": FIELDS, "replay": recording}
        here = tf.tune(f, local, cache=False, **kw)
        there = tf.tune(f, executor=ex, cache=False, **kw)
    assert there.best_params == here.best_params
    assert there.best_time == here.best_time
    assert {t.device for t in there.trials} == {local.fingerprint}
    assert len(there.trials) == len(here.trials)
    assert_nothing_lost_or_twice(there)


def test_a_killed_worker_s_candidates_go_to_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = RayExecutor(2)
    victim = ex.pids[0]
    killed_at: list[float] = []
    waits = []
    next_result = RayGroup.next

    def next_killing_a_worker(self: RayGroup) -> Any:
        # Mid-run whatever the machine's speed: from the third wait on,
        # once both workers hold a candidate.
        waits.append(time.monotonic())
        if not killed_at and len(waits) >= 3 and len(self.running) == 2:
            os.kill(victim, signal.SIGKILL)
            killed_at.append(time.monotonic())
        return next_result(self)

    monkeypatch.setattr(RayGroup, "next", next_killing_a_worker)
    start = time.monotonic()
    with ex, pytest.warns(RuntimeWarning, match=r"1 of 2 Ray workers died .* [1-9]\d* candidates"):
        r = tf.tune(softmax(128, 1024), executor=ex, trials=16, seconds=60, cache=False, seed=2)
    assert killed_at, "the worker was not killed"
    assert killed_at[0] - start < r.elapsed, "the run ended before the worker died"
    assert_nothing_lost_or_twice(r)
    assert [t for t in r.trials if t.status == "failed"] == []
    assert r.best_time <= r.default_time  # type: ignore[operator]


@pytest.mark.usefixtures("own_cache")
def test_two_device_fingerprints_give_two_cache_entries_tuned_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[tuple[int, float]] = []
    next_result = RayGroup.next

    def spy(self: RayGroup) -> Any:
        waits.append((id(self), time.monotonic()))
        return next_result(self)

    with RayExecutor([Worker("cpu", 1), Worker("cpu", 2)]) as ex:
        with monkeypatch.context() as m:
            m.setattr(RayGroup, "next", spy)
            found = tf.tune(softmax(32, 128), executor=ex, devices="all", trials=3)
        with pytest.raises(ValueError, match="2 device fingerprints"):
            tf.tune(softmax(32, 128), executor=ex, trials=3)
    assert len(found) == 2
    for fingerprint, r in found.items():
        assert {t.device for t in r.trials} == {fingerprint}
    mine = softmax(32, 128).fingerprint
    entries = [e for e in tf.cache.entries() if e["key"]["fusion"] == mine]
    cores = sorted(e["key"]["device"]["cores"] for e in entries)
    assert cores == [1, 2]
    # Both devices were tuned at once: each waited for results while the
    # other was still waiting for its own.
    spans = {}
    for group, at in waits:
        first, _ = spans.get(group, (at, at))
        spans[group] = (first, at)
    (a_first, a_last), (b_first, b_last) = spans.values()
    assert a_first < b_last and b_first < a_last, spans


def test_an_error_on_one_device_stops_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    next_result = RayGroup.next
    with RayExecutor([Worker("cpu", 1), Worker("cpu", 2)]) as ex:
        doomed = ex.actors[1]  # the group tuned second, were they in turn

        def failing(self: RayGroup) -> Any:
            if self.live == [doomed]:
                raise RuntimeError("every Ray worker of this device died")
            return next_result(self)

        monkeypatch.setattr(RayGroup, "next", failing)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="every Ray worker of this device died"):
            tf.tune(softmax(128, 1024), executor=ex, devices="all", trials=200, cache=False)
        assert time.monotonic() - start < 15, "the other device's tuning went on"


@pytest.mark.usefixtures("own_cache")
def test_a_run_that_died_resumes_from_its_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    f, d = softmax(16, 64), tf.Device.cpu()
    with monkeypatch.context() as m:
        # The driver dies before it closes the journal and caches a winner.
        m.setattr(Journal, "finish", lambda self: None)
        m.setattr(tf.cache, "store", lambda *args, **kwargs: True)
        first = tf.tune(f, d, trials=6, seed=5)
    journal = Journal.of(f, d, "random", 5)
    assert journal.path is not None and journal.path.exists()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = tf.tune(f, d, trials=6, seed=5)
    assert any("resuming an interrupted tuning run" in str(w.message) for w in caught)
    # Every candidate's time is the journal's: nothing was measured again.
    times = {str(t.params): t.time for t in first.trials}
    assert all(times[str(t.params)] == t.time for t in again.trials)
    assert not journal.path.exists()


def test_workers_check_against_the_workloads_reference_and_tolerance() -> None:
    kw: dict[str, Any] = {"trials": 2, "seed": 1, "cache": False, "progress": False}
    with RayExecutor(1) as ex:
        r = tf.tune(ScaledReference(off=1e-4, rtol=1e-3), executor=ex, **kw)
        assert {t.status for t in r.trials} <= {"ok", "cut", "duplicate"}
        with pytest.raises(tf.ParamsError, match="no candidate ran correctly"):
            tf.tune(ScaledReference(off=1e-4, rtol=1e-6), executor=ex, **kw)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_stops_every_device_s_tuning() -> None:
    with RayExecutor([Worker("cpu", 1), Worker("cpu", 2)]) as ex:
        # Timed from here: workers start slowly on a loaded machine, and a
        # Ctrl-C before tuning began would stop the test run itself.
        # The problem is large enough that its space takes far longer than
        # 2 s: at 128 x 1024, a faster executor finished it first.
        threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            tf.tune(softmax(512, 4096), executor=ex, devices="all", trials=200, cache=False)
        stopped = time.monotonic() - start
    assert stopped < 15, f"tuning went on {stopped:.0f} s after Ctrl-C"
    assert [t.name for t in threading.enumerate() if t.name.startswith("tilefuse")] == []


def test_the_workers_tune_started_stop_with_it_also_on_ctrl_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interrupted(self: RayGroup) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(RayGroup, "next", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        tf.tune(softmax(16, 64), executor="ray", trials=2, cache=False)
    # The traceback (kept, as an interactive session keeps it) holds
    # tune's frames: its workers must be stopped, not merely unreferenced.
    assert caught.traceback
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, "tune's Ray workers still hold their CPUs"
        time.sleep(0.2)


def test_bad_executor_arguments_are_clear_errors() -> None:
    f = softmax(16, 64)
    with pytest.raises(ValueError, match="devices='all' needs a Ray executor"):
        tf.tune(f, devices="all")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="executor='dask' is not"):
        tf.tune(f, executor="dask")
    with pytest.raises(ValueError, match=r"Worker\.device"):
        Worker("tpu")


@pytest.mark.usefixtures("own_cache")
def test_the_cli_tunes_on_ray_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fusion = tmp_path / "softmax.json"
    fusion.write_text(softmax(32, 256).to_json())
    argv = ["tune", str(fusion), "--executor", "ray", "--workers", "2", "--trials", "3"]
    assert main([*argv, "--json", str(tmp_path / "r.json")]) == 0
    assert "best" in capsys.readouterr().out
    result = json.loads((tmp_path / "r.json").read_text())
    assert len({t["device"] for t in result["trials"]}) == 1
    mine = softmax(32, 256).fingerprint
    (entry,) = [e for e in tf.cache.entries() if e["key"]["fusion"] == mine]
    assert entry["key"]["device"]["cores"] == 1  # the worker's device, not this process's
