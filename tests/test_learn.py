"""Learned heuristics: from a family's tuned shapes, a document in the
cache's learned/ folder that heuristics() consults for shapes nobody
tuned, evaluated in Rust as the learner's tree says, and measured on
held-out shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilefuse as tf
from tilefuse import _native
from tilefuse.cli import main
from tilefuse.collect import grid
from tilefuse.family_times import DEFAULT, FamilyTimes
from tilefuse.learn import TREE, _cover, _guard, _label, _tree

# Each test its own cache: collecting and learning write into it.
pytestmark = pytest.mark.usefixtures("own_cache")

GRID = {"rows": "8..64", "cols": "64,256"}


@pytest.fixture
def collected() -> tf.Device:
    cpu = tf.Device.cpu()
    tf.collect("row_sum", GRID, cpu, trials=3, seed=0, progress=False)
    return cpu


def test_learning_serves_shapes_nobody_tuned(collected: tf.Device) -> None:
    budget = tf.timing.Budget(warmup=0.01, rep=0.02)
    r = tf.learn("row_sum", GRID, collected, holdout=0.25, budget=budget, progress=False)
    assert Path(r.path).parent.name == "learned" and Path(r.path).name == "row_sum.json"
    assert len(r.training) == 6 and len(r.held_out) == 2
    assert all(q.default > 0 and q.tuned > 0 and q.learned > 0 for q in r.held_out)
    assert r.tuned_over_learned is not None and r.worst_over_default is not None
    document = json.loads(Path(r.path).read_text())
    assert document["version"] == 1 and document["scheduler"] == "reduction"
    assert document["meta"]["training"] == r.training
    # A shape nobody tuned: the learned heuristic's pick, named as such.
    untuned = tf.workloads.get("row_sum", rows=24, cols=100).payload
    source = untuned.params_source(collected)
    assert source.startswith(f"learned: {r.path} (leaf "), source
    pick = tf.cache.learned(untuned, collected)
    assert pick is not None
    want = pick["params"] or untuned.heuristics(device=collected, cache=False).to_dict()
    assert untuned.heuristics(device=collected).to_dict() == want
    # The exact entry comes first, and cache=False skips both.
    tuned = tf.workloads.get("row_sum", rows=8, cols=64).payload
    assert tuned.params_source(collected).startswith("cache: ")
    default = untuned.heuristics(device=collected, cache=False)
    assert (
        default.to_dict() == tf.Fusion.heuristics(untuned, device=collected, cache=False).to_dict()
    )


def test_learning_needs_every_shape_tuned(collected: tf.Device) -> None:
    missing = r"learn: 8 of 12 shapes have a cache entry on .*missing: row_sum"
    with pytest.raises(ValueError, match=missing):
        tf.learn("row_sum", {"rows": "8..64", "cols": "64,256,1024"}, collected, progress=False)
    with pytest.raises(ValueError, match=r"learn: 0 of 1 shapes"):
        tf.learn("row_sum", {"rows": 3, "cols": 5}, collected, progress=False)


def test_a_corrupt_or_foreign_learned_file_is_skipped_with_a_warning(
    collected: tf.Device,
) -> None:
    folder = Path(tf.cache.directory() or "") / "learned"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a-broken.json").write_text("{not json")
    f = tf.workloads.get("row_sum", rows=24, cols=100).payload
    with pytest.warns(RuntimeWarning, match=r"learned heuristic .*a-broken.json skipped"):
        assert f.params_source(collected) == "default heuristic"
    looping = {"version": 1, "name": "x", "nodes": [{"leaf": 3}], "configs": []}
    (folder / "a-broken.json").write_text(json.dumps(looping))
    with pytest.warns(RuntimeWarning, match="skipped"):
        assert (
            f.heuristics(device=collected).to_dict()
            == f.heuristics(device=collected, cache=False).to_dict()
        )


def test_the_rust_walk_picks_what_the_fitted_tree_predicts(collected: tf.Device) -> None:
    """The document's nodes, evaluated by lookups, choose the classes
    scikit-learn's tree predicts for the shapes it was fitted on."""
    from sklearn.tree import DecisionTreeClassifier

    shapes = grid({"rows": "8..1024", "cols": "64,512,4096"})
    works = [tf.workloads.get("row_sum", **s).payload for s in shapes]
    x = [_native.learned_features(w._native)[1] for w in works]
    rng = np.random.default_rng(3)
    labels = [int(v) for v in rng.integers(-1, 2, len(works))]
    nodes, _ = _tree(x, labels, seed=0)
    configs = [{"scheduler": "reduction", "unroll_factor_reduction": u} for u in (2, 4)]
    _native.learned_save(works[0]._native, collected._native, "walk", nodes, configs, {})
    fit = DecisionTreeClassifier(**TREE, random_state=0).fit(x, labels)
    for w, want in zip(works, fit.predict(x), strict=True):
        params, _, _, _, _ = _native.learned_get(w._native, collected._native)
        got = -1 if params is None else [2, 4].index(params["unroll_factor_reduction"])
        assert got == want


def test_set_cover_and_labels_keep_the_default_where_it_is_near_the_best() -> None:
    rows = [
        {"default": 1.0, "a": 0.5, "b": 0.9},  # a covers
        {"default": 1.0, "a": 2.0, "b": 0.6},  # b covers
        {"default": 1.0, "a": 0.99, "b": 1.2},  # the default is within 5 %
        {"default": 1.0, "a": 0.93, "b": 1.2},  # a covers, but gains under 10 %
    ]
    assert _cover(rows, ["a", "b"], 0.05, 8) == ["a", "b"]
    assert _cover(rows, ["a", "b"], 0.05, 1) == ["a"]
    assert [_label(r, ["a", "b"], 0.05) for r in rows] == [0, 1, -1, -1]


def test_the_learn_command_prints_held_out_shapes(
    collected: tf.Device, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "learned.png"
    argv = ["learn", "row_sum", "--sizes", "rows=8..64", "--sizes", "cols=64,256"]
    assert main([*argv, "--device", "cpu", "--plot", str(png), "--name", "mine"]) == 0
    out = capsys.readouterr().out
    assert "row_sum: learned" in out and "geometric" in out and "learned ms" in out
    assert png.stat().st_size > 0
    assert main([*argv, "--device", "cpu", "--name", "../escape"]) == 1
    assert "letters, digits" in capsys.readouterr().err
    recording = tmp_path / "times.json"
    assert main([*argv, "--device", "cpu", "--folds", "2", "--record", str(recording)]) == 0
    assert "judged on 2-fold" in capsys.readouterr().out
    replay = ["learn", "row_sum", "--replay", str(recording), "--device", "cpu"]
    assert main([*replay, "--held-out", "rows=16,cols=64", "--held-out", "rows=8,cols=256"]) == 0
    assert "rows=16" in capsys.readouterr().out


def test_a_tune_starts_from_the_learned_config() -> None:
    cpu = tf.Device.cpu()
    f = tf.workloads.get("row_sum", rows=24, cols=100).payload
    config = {"scheduler": "reduction", "unroll_factor_reduction": 2}
    _native.learned_save(f._native, cpu._native, "one-leaf", [{"leaf": 0}], [config], {})
    assert f.heuristics(device=cpu).unroll_factor_reduction == 2  # type: ignore[union-attr]
    r = tf.tune(f, cpu, trials=3, seed=0, cache=False, progress=False)
    seeds = [t for t in r.trials if t.heuristic == "learned"]
    assert seeds and seeds[0].origin == "seed"
    assert seeds[0].params["unroll_factor_reduction"] == 2


def test_a_leaf_whose_config_does_not_win_everywhere_keeps_the_default() -> None:
    nodes = [
        {"feature": 0, "threshold": 1.0, "left": 1, "right": 2},
        {"leaf": 0},
        {"leaf": 1},
    ]
    rows = [
        {"default": 1.0, "a": 0.5, "b": 0.5},  # leaf 1: a wins
        {"default": 1.0, "a": 0.9, "b": 0.5},  # leaf 1: a wins by over 5 % too
        {"default": 1.0, "a": 0.5, "b": 0.5},  # leaf 2: b wins here
        {"default": 1.0, "a": 0.5, "b": 0.97},  # leaf 2: but not by 5 % here
    ]
    _guard(nodes, [1, 1, 2, 2], rows, ["a", "b"], 0.05)
    assert [n.get("leaf") for n in nodes[1:]] == [0, None]


def test_one_learned_on_another_device_of_the_kind_serves_and_says_so() -> None:
    cpu = tf.Device.cpu()
    f = tf.workloads.get("row_sum", rows=24, cols=100).payload
    config = {"scheduler": "reduction", "unroll_factor_reduction": 2}
    path = Path(
        _native.learned_save(f._native, cpu._native, "elsewhere", [{"leaf": 0}], [config], {})
    )
    document = json.loads(path.read_text())
    document["device"].update(name="another CPU", cores=document["device"]["cores"] + 6)
    path.write_text(json.dumps(document))
    assert f.params_source(cpu).endswith("(leaf 0: its params, learned on another CPU)")
    # A learned heuristic of another kind of device does not serve.
    document["device"]["backend"] = "vulkan"
    path.write_text(json.dumps(document))
    assert f.params_source(cpu) == "default heuristic"


def test_recorded_times_replay_learning_and_its_judgement_without_timing(
    collected: tf.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``record`` keeps what learning timed; ``replay`` learns the same
    document from it and judges it by the same times, timing nothing."""
    recording = tmp_path / "row_sum.json"
    budget = tf.timing.Budget(warmup=0.01, rep=0.02)
    first = tf.learn(
        "row_sum", GRID, collected, folds=4, budget=budget, record=recording, progress=False
    )
    times = FamilyTimes.load(recording)
    assert times.family == "row_sum" and times.shapes == grid(GRID)
    assert all(DEFAULT in row for row in times.times)
    saved = Path(first.path or "").read_text()

    def no_timing(*_: object) -> None:
        raise AssertionError("a replay timed a kernel")

    monkeypatch.setattr(sys.modules["tilefuse.learn"], "_timed", no_timing)
    again = tf.learn("row_sum", None, collected, folds=4, replay=recording, progress=False)
    assert again.held_out == first.held_out and again.configs == first.configs
    assert Path(again.path or "").read_text() == saved
    with pytest.raises(ValueError, match="records 'row_sum', not 'softmax'"):
        tf.learn("softmax", None, collected, replay=recording, progress=False)
    with pytest.raises(ValueError, match="other shapes than --sizes gives"):
        tf.learn("row_sum", {"rows": 8, "cols": 64}, collected, replay=recording, progress=False)


def test_k_fold_judges_every_shape_once_and_saves_one_learned_from_all(
    collected: tf.Device, tmp_path: Path
) -> None:
    recording = tmp_path / "row_sum.json"
    budget = tf.timing.Budget(warmup=0.01, rep=0.02)
    r = tf.learn("row_sum", GRID, collected, folds=3, budget=budget, record=recording)
    assert r.folds == 3
    assert sorted(map(str, (q.sizes for q in r.held_out))) == sorted(map(str, grid(GRID)))
    meta = json.loads(Path(r.path or "").read_text())["meta"]
    assert meta["training"] == grid(GRID) and meta["held_out"] == [] and meta["folds"] == 3
    # A list of held-out shapes: judged on exactly those, learned from the rest.
    shapes = [{"rows": 8, "cols": 64}, {"rows": 64, "cols": 256}]
    listed = tf.learn("row_sum", None, collected, held_out=shapes, replay=recording)
    assert [q.sizes for q in listed.held_out] == shapes and len(listed.training) == 6
    with pytest.raises(ValueError, match=r"held-out shape \{'rows': 9, 'cols': 64\} is not one"):
        tf.learn("row_sum", None, collected, held_out=[{"rows": 9, "cols": 64}], replay=recording)
    with pytest.raises(ValueError, match="folds must be 2 to the 8 shapes, got 9"):
        tf.learn("row_sum", None, collected, folds=9, replay=recording)


def test_times_of_another_device_are_learned_from_but_not_saved(
    collected: tf.Device, tmp_path: Path
) -> None:
    recording = tmp_path / "row_sum.json"
    budget = tf.timing.Budget(warmup=0.01, rep=0.02)
    tf.learn("row_sum", GRID, collected, budget=budget, record=recording, progress=False)
    doc = json.loads(recording.read_text())
    doc["fingerprint"] = "elsewhere"
    recording.write_text(json.dumps(doc))
    r = tf.learn("row_sum", None, collected, replay=recording, progress=False)
    assert r.path is None and len(r.held_out) == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d.update(version=2), "version"),
        (lambda d: d["times"].pop(), "times"),
        (lambda d: d["winners"].__setitem__(0, "config 99"), r"winners\[0\]"),
        (lambda d: d["times"][1].pop("default"), r"times\[1\]"),
        (lambda d: d["times"][2].update({"config 99": 1.0}), r"times\[2\]"),
    ],
)
def test_a_broken_recording_names_its_field(
    collected: tf.Device, tmp_path: Path, change: Any, field: str
) -> None:
    recording = tmp_path / "row_sum.json"
    budget = tf.timing.Budget(warmup=0.01, rep=0.02)
    tf.learn("row_sum", GRID, collected, budget=budget, record=recording, progress=False)
    doc = json.loads(recording.read_text())
    change(doc)
    recording.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"family times {recording}: {field}: "):
        FamilyTimes.load(recording)


def test_learned_heuristics_ship_in_bundles(tmp_path: Path) -> None:
    """Exported with the cache's entries; served from a registered bundle
    (named BUNDLE#NAME) and copied by an import, where a heuristic of the
    same name already there stays."""
    cpu = tf.Device.cpu()
    f = tf.workloads.get("row_sum", rows=24, cols=100).payload
    config = {"scheduler": "reduction", "unroll_factor_reduction": 2}
    path = Path(
        _native.learned_save(f._native, cpu._native, "shipped", [{"leaf": 0}], [config], {})
    )
    bundle = tmp_path / "bundle.json"
    assert tf.cache.export(bundle) == 1
    assert len(json.loads(bundle.read_text())["learned"]) == 1
    path.unlink()
    assert f.params_source(cpu) == "default heuristic"
    tf.cache.register_bundle(bundle)
    try:
        assert f.params_source(cpu).startswith(f"learned: {bundle}#shipped (leaf 0: its params")
        assert f.heuristics(device=cpu).unroll_factor_reduction == 2  # type: ignore[union-attr]
    finally:
        tf.cache.unregister_bundle(bundle)
    assert tf.cache.import_bundle(bundle) == (1, 1)
    assert json.loads(path.read_text())["name"] == "shipped"
    assert tf.cache.import_bundle(bundle) == (0, 1)
    doc = json.loads(bundle.read_text())
    doc["learned"][0]["nodes"] = [{"leaf": 5}]
    bundle.write_text(json.dumps(doc))
    with pytest.raises(tf.TilefuseError, match=r"learned\[0\]: node 0 points outside"):
        tf.cache.import_bundle(bundle)


FAMILIES = Path(__file__).parents[1] / "benches/families"


@pytest.mark.parametrize("family", ["rmsnorm", "column_sum"])
def test_a_shipped_recording_replays_the_reported_quality(family: str) -> None:
    """Learning and its 4-fold judgement from ``benches/families``, with
    nothing timed, give the numbers BENCHMARKS.md reports for them."""
    rows = json.loads(
        (Path(__file__).parents[1] / "benches/results/learned_local.json").read_text()
    )
    want = next(r for r in rows["rows"] if r["family"] == family)
    r = tf.learn(
        family, None, "cpu", folds=4, seed=0, replay=FAMILIES / f"{family}_cpu.json", progress=False
    )
    assert r.configs == want["configs"] and len(r.held_out) == want["shapes"]
    assert r.tuned_over_learned == pytest.approx(want["tuned / learned"], rel=1e-12)
    assert r.worst_over_default == pytest.approx(want["worst learned / default"], rel=1e-12)
    assert r.gains == pytest.approx((want["tuned speedup"], want["learned speedup"]), rel=1e-12)
