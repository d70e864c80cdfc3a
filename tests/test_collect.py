"""Collecting tuning data: a workload family tuned at every shape of a
grid into the heuristic cache, resumably, from Python and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tilefuse as tf
from tilefuse.cli import main
from tilefuse.collect import grid

# Each test its own cache: collecting writes entries.
pytestmark = pytest.mark.usefixtures("own_cache")


def test_a_grid_takes_ranges_of_powers_of_two_lists_and_values() -> None:
    shapes = grid({"rows": "128..1024", "cols": "64,100", "epilogue": "relu"})
    assert [s["rows"] for s in shapes[::2]] == [128, 256, 512, 1024]
    assert [s["cols"] for s in shapes[:2]] == [64, 100]
    assert all(s["epilogue"] == "relu" for s in shapes) and len(shapes) == 8
    assert grid({"n": [3, 5], "m": 7}) == [{"n": 3, "m": 7}, {"n": 5, "m": 7}]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"rows": "1024..128"}, "rows: expected LO..HI with 0 < LO <= HI, got '1024..128'"),
        ({"rows": "0..8"}, "rows: expected LO..HI"),
        ({"rows": "a..8"}, "rows: expected LO..HI"),
        ({"rows": []}, "rows: no values"),
        ({"rows": "4,"}, "rows: an empty value"),
    ],
)
def test_a_bad_size_axis_names_itself(spec: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(".", r"\.")):
        grid(spec)  # type: ignore[arg-type]


def test_collect_tunes_each_shape_once_into_the_cache() -> None:
    cpu = tf.Device.cpu()
    sizes = {"rows": "8..16", "cols": 64}
    first = tf.collect("softmax", sizes, cpu, trials=2, seed=0, progress=False)
    assert [c.sizes for c in first] == [{"rows": 8, "cols": 64}, {"rows": 16, "cols": 64}]
    assert {c.outcome for c in first} <= {"tuned", "default"}
    assert all(c.trials > 0 and c.speedup is not None for c in first)
    for c in first:
        w = tf.workloads.get("softmax", **c.sizes)
        assert w.payload.params_source(cpu).startswith("cache: ")
    # Collected again: every shape is in the cache, none is tuned.
    again = tf.collect("softmax", sizes, cpu, trials=2, progress=False)
    assert [c.outcome for c in again] == ["cached", "cached"]
    assert [c.trials for c in again] == [0, 0]
    redone = tf.collect(
        "softmax", {"rows": 8, "cols": 64}, cpu, trials=2, redo=True, progress=False
    )
    assert redone[0].outcome != "cached"


def test_collect_names_an_unknown_family() -> None:
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        tf.collect("nope", {"rows": 8}, "cpu", progress=False)


def test_the_collect_command_prints_a_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "collected.json"
    argv = ["collect", "row_sum", "--sizes", "rows=8..16", "--sizes", "cols=32", "--device", "cpu"]
    assert main([*argv, "--trials", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert "row_sum: collected into the heuristic cache" in printed.out
    assert "rows=16, cols=32" in printed.out and "[2/2] row_sum" in printed.err
    rows = json.loads(out.read_text())
    assert [r["sizes"] for r in rows] == [{"rows": 8, "cols": 32}, {"rows": 16, "cols": 32}]
    assert main(["collect", "row_sum", "--sizes", "rows", "--device", "cpu"]) == 1
    assert "--sizes: expected K=SPEC, got 'rows'" in capsys.readouterr().err


def test_the_collect_command_collects_on_a_ray_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--executor ray`` hands collect the cluster's executor, built from
    ``--address``, ``--workers`` and ``--threads``, and closes it after."""
    made: list[tuple[object, ...]] = []

    class Cluster:
        def __init__(self, workers: int | None, *, address: str | None, threads: int) -> None:
            made.append((workers, address, threads))

        def __enter__(self) -> Cluster:
            return self

        def __exit__(self, *_: object) -> None:
            made.append(("closed",))

    given: list[object] = []
    monkeypatch.setattr("tilefuse.distributed.RayExecutor", Cluster)
    monkeypatch.setattr(
        "tilefuse.cli_collect.collect", lambda *a, **k: given.append(k["executor"]) or []
    )
    argv = ["collect", "row_sum", "--sizes", "rows=8", "--sizes", "cols=32", "--quiet"]
    assert main([*argv, "--executor", "ray", "--address", "head:6379", "--workers", "3"]) == 0
    assert made == [(3, "head:6379", 1), ("closed",)]
    assert isinstance(given[0], Cluster)
    assert main(argv) == 0 and given[1] == "local"
