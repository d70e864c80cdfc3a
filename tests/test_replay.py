"""Strategy replay from Python and the command line: a space recorded
once (``tilefuse.replay.record``, ``tilefuse record``), then strategies
compared against the recording (``tilefuse.replay.compare``, ``tilefuse
replay``) with no device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tilefuse as tf
from tilefuse.cli import main

FIELDS = ["reduction_invocations", "unroll_factor_reduction"]
#: A space recorded on lavapipe, shared with the Rust replay tests.
FIXTURE = Path(__file__).parents[1] / "crates/tilefuse-tune/tests/fixtures/softmax_gpu.json"
#: The recorded spaces of `benches/record_spaces.py`.
SPACES = Path(__file__).parents[1] / "benches/spaces"


@pytest.fixture(scope="module")
def recorded() -> str:
    f = tf.workloads.get("softmax", rows=16, cols=64).payload
    return tf.replay.record(f, "cpu", FIELDS, passes=2, progress=False)


def test_a_recording_holds_every_point_of_the_space_once(recorded: str) -> None:
    r = json.loads(recorded)
    assert sorted(r["fields"]) == sorted(FIELDS)
    points = [tuple(p) for p, _ in r["times"]]
    size = r["sizes"][0] * r["sizes"][1]
    assert len(points) == len(set(points)) == size
    assert tuple(r["base"]) in points
    assert any(t is not None for _, t in r["times"])


def test_recording_reports_each_measured_point() -> None:
    f = tf.workloads.get("softmax", rows=8, cols=32).payload
    seen: list[int] = []
    text = tf.replay.record(f, "cpu", ["unroll_factor_reduction"], progress=seen.append)
    assert seen == list(range(1, len(seen) + 1))
    assert len(seen) >= len(json.loads(text)["times"])


def test_a_replay_is_the_same_every_time_and_exhaustive_finds_the_best(recorded: str) -> None:
    first = tf.replay.compare(recorded, ("random", "surrogate", "exhaustive"), seeds=4)
    assert first == tf.replay.compare(recorded, ("random", "surrogate", "exhaustive"), seeds=4)
    points = len(json.loads(recorded)["times"])
    for row in first:
        assert len(row.trials) == 4 and list(row.trials) == sorted(row.trials)
        assert all(1 <= t <= points for t in row.trials)
    # Exhaustive walks the space in order: every seed stops at one point.
    assert len(set(first[2].trials)) == 1


def test_the_surrogate_needs_fewer_trials_than_random_on_a_recorded_softmax() -> None:
    text = FIXTURE.read_text()
    random, surrogate = tf.replay.compare(text, ("random", "surrogate"), seeds=10)
    assert surrogate.within_tenth >= 9, surrogate
    assert surrogate.mean < random.mean, (surrogate, random)
    assert surrogate.nine_in_ten == surrogate.trials[8]


def test_the_surrogate_beats_random_over_the_recorded_corpus() -> None:
    # benches/spaces: 96 spaces of the CPU device, lavapipe and an H200.
    # Over 400 seeds the surrogate takes 984 trials in all and random 1846
    # (`tilefuse replay benches/spaces/*.json --seeds 400`); half is the bar.
    spaces = sorted(SPACES.glob("*.json"))
    assert len(spaces) >= 20, spaces
    totals = {"random": 0.0, "surrogate": 0.0}
    for path in spaces:
        for r in tf.replay.compare(path.read_text(), tuple(totals), seeds=20):
            totals[r.strategy] += r.mean
    assert totals["surrogate"] < 0.75 * totals["random"], totals


def test_the_summary_statistics_count_seeds_as_documented() -> None:
    r = tf.replay.StrategyReplay("random", 100, (1, 2, 3, 4, 5, 6, 7, 8, 9, 50))
    assert r.mean == 9.5
    assert r.nine_in_ten == 9
    assert r.within_tenth == 9
    assert tf.replay.StrategyReplay("random", 100, (30,)).nine_in_ten == 30


def test_bad_replays_are_clear_errors(recorded: str) -> None:
    with pytest.raises(tf.ParamsError, match="strategy"):
        tf.replay.compare(recorded, ["annealing"])
    with pytest.raises(tf.ParamsError, match="tolerance"):
        tf.replay.compare(recorded, tolerance=-0.1)
    for text in ('{"times": []}', "not json"):
        with pytest.raises(tf.ParamsError, match="not a recording"):
            tf.replay.compare(text)
    with pytest.raises(ValueError, match="seeds"):
        tf.replay.compare(recorded, seeds=0)
    q = tf.Fusion()
    a, b = q.input((8, 16), name="a"), q.input((16, 16), name="b")
    q.output(tf.matmul(a, b).exp().sum(axis=1))
    with pytest.raises(ValueError, match="segments"):
        tf.replay.record(q, "cpu", progress=False)


def test_the_commands_record_and_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = tmp_path / "softmax.json", tmp_path / "replay.json"
    size = ["--size", "rows=16", "--size", "cols=64"]
    fields = [a for f in FIELDS for a in ("--field", f)]
    assert main(["record", "softmax", *size, "--device", "cpu", *fields, "--out", str(out)]) == 0
    assert "points" in capsys.readouterr().out
    assert main(["replay", str(out), "--seeds", "3", "--json", str(table)]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(table.read_text())
    assert [r["strategy"] for r in rows] == list(tf.replay.STRATEGIES)
    assert all(len(r["trials"]) == 3 and r["recording"] == str(out) for r in rows)
    assert "surrogate" in printed and "9 seeds in 10" in printed and "softmax " in printed
    assert "│ all" not in printed
    # Over several recordings, one more row per strategy sums them.
    again = tmp_path / "again.json"
    again.write_text(out.read_text())
    assert main(["replay", str(out), str(again), "--seeds", "3", "--strategy", "random"]) == 0
    total = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│ all")]
    mean = next(r["mean"] for r in rows if r["strategy"] == "random")
    assert len(total) == 1 and "random" in total[0] and f"{2 * mean:.1f}" in total[0]
    assert main(["replay", str(tmp_path / "missing.json")]) == 1


def test_a_tuning_run_replays_a_recording_over_its_fields(recorded: str) -> None:
    f = tf.workloads.get("softmax", rows=16, cols=64).payload
    r = tf.tune(f, "cpu", replay=recorded, cache=False, progress=False)
    best = min(t for _, t in json.loads(recorded)["times"] if t is not None)
    assert r.best_time == pytest.approx(best, rel=0.05)
    assert r.changes.keys() <= set(FIELDS)
    with pytest.raises(ValueError, match="covers the fields"):
        tf.tune(f, "cpu", replay=recorded, fields=["unroll_factor_reduction"], cache=False)
