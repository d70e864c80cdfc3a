"""``tilefuse bench``: suites in YAML (sweeps, errors with file, line and
key), and its JSON (valid against the shipped schema), CSV and PNG."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import jsonschema
import matplotlib.image
import pytest
from rich.console import Console

import tilefuse as tf
from tilefuse import bench, cli
from tilefuse.suite import load_suite, names
from tilefuse.yamlfile import YamlError

THREE = """\
version: 1
description: three small workloads
workloads:
  - workload: softmax
    sizes: {rows: 16, cols: [64, 256]}
  - workload: column_sum
    sizes: {rows: 64, cols: 48}
  - workload: matmul
    sizes: {m: [16, 32], n: [16, 32], k: 16, epilogue: bias}
    zip: true
"""


def test_suites_sweep_crossed_or_zipped(tmp_path: Path) -> None:
    path = tmp_path / "three.yaml"
    path.write_text(THREE)
    suite = load_suite(path)
    assert suite.name == "three" and suite.description == "three small workloads"
    assert [w.label for w in suite.workloads] == [
        "softmax(rows=16,cols=64)",
        "softmax(rows=16,cols=256)",
        "column_sum(rows=64,cols=48)",
        "matmul(m=16,n=16,k=16,epilogue=bias)",
        "matmul(m=32,n=32,k=16,epilogue=bias)",
    ]
    assert {"smoke", "memory", "matmul"} <= set(names())
    for name in names():
        assert load_suite(name).workloads


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("version: 2\nworkloads: []\n", ":1: version", "must be 1"),
        ("version: 1\nworkload: []\n", ":2: workload", "unknown key; expected one of"),
        ("version: 1\nworkloads: []\n", ":2: workloads", "must be a non-empty list"),
        (
            "version: 1\nworkloads:\n  - workload: sofmax\n",
            ":3: workloads[0].workload",
            "unknown workload 'sofmax'",
        ),
        (
            "version: 1\nworkloads:\n  - workload: softmax\n    sizes:\n      rows: 8\n"
            "      cols: nine\n",
            ":6: workloads[0].sizes.cols",
            "size cols must be an integer, got 'nine'",
        ),
        (
            "version: 1\nworkloads:\n  - workload: softmax\n    sizes: {rows: 8, colz: 9}\n",
            ":4: workloads[0].sizes.colz",
            "unknown size 'colz'",
        ),
        (
            "version: 1\nworkloads:\n  - workload: softmax\n"
            "    sizes: {rows: [1, 2], cols: [1, 2, 3]}\n    zip: true\n",
            ":4: workloads[0].sizes",
            "zip needs lists of one length, got [2, 3]",
        ),
        ("version: 1\nworkloads: [\n", ":3", "while parsing"),
    ],
)
def test_suite_errors_name_the_file_line_and_key(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(YamlError) as e:
        load_suite(path)
    assert str(e.value).startswith(f"{path}{where}"), str(e.value)
    assert message in str(e.value)


def test_an_unknown_suite_names_the_shipped_ones() -> None:
    with pytest.raises(FileNotFoundError, match="shipped suites: matmul, memory, smoke"):
        load_suite("smok")


@pytest.mark.parametrize("device_name", ["cpu", "gpu"])
def test_bench_writes_json_valid_against_its_schema_csv_and_a_png(
    device_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if device_name == "gpu":
        request.getfixturevalue("gpu")  # fails in CI without an adapter
    # wide enough that no label folds, whatever widths the timings take
    monkeypatch.setattr(cli, "_out", Console(width=200))
    suite = tmp_path / "three.yaml"
    suite.write_text(THREE)
    out = {ext: tmp_path / f"out.{ext}" for ext in ("json", "csv", "png")}
    argv = ["bench", str(suite), "--device", device_name, "--warmup", "0.005", "--rep", "0.02"]
    argv += [f"--{'plot' if ext == 'png' else ext}={p}" for ext, p in out.items()]
    assert cli.main(argv) == 0
    shown = capsys.readouterr().out
    assert "three on" in shown and "softmax(rows=16," in shown and "vs numpy" in shown
    document = json.loads(out["json"].read_text())
    jsonschema.validate(document, json.loads(bench.SCHEMA.read_text()))
    results = document["results"]
    assert len(results) == 5 and all(r["verified"] for r in results)
    assert all(r["speedup_over_numpy"] > 0 for r in results)
    assert results[0]["environment"]["backend"] == ("cpu" if device_name == "cpu" else "vulkan")
    rows = list(csv.DictReader(out["csv"].open()))
    assert [r["workload"] for r in rows] == [r["workload"] for r in results]
    assert [float(r["median_s"]) for r in rows] == [r["median_s"] for r in results]
    image = matplotlib.image.imread(out["png"])
    assert image.shape[:2] == (500, 800) and image.std() > 0


def test_bench_against_a_baseline_marks_changes_beyond_the_noise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "_out", Console(width=200))
    suite, old = tmp_path / "three.yaml", tmp_path / "old.json"
    suite.write_text(THREE)
    argv = ["bench", str(suite), "--device", "cpu", "--warmup", "0.005", "--rep", "0.02"]
    assert cli.main([*argv, "--no-numpy", "--quiet", f"--json={old}"]) == 0
    document = json.loads(old.read_text())
    results = document["results"]
    for r, scale in zip(results, (10.0, 0.1), strict=False):  # then 10x faster, 10x slower
        for q in ("median_s", "p20_s", "p80_s"):
            r[q] *= scale
    del results[2]  # a workload the baseline lacks
    old.write_text(json.dumps(document))
    assert cli.main([*argv, "--no-numpy", f"--baseline={old}"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert len(rows) == 5, rows
    assert "x faster" in rows[0] and "x slower" in rows[1] and rows[2].rstrip(" │").endswith("-")
    assert cli.main([*argv, f"--baseline={tmp_path / 'three.yaml'}"]) == 1
    assert "not the JSON of a tilefuse bench run" in capsys.readouterr().err


def test_the_schema_rejects_what_is_not_a_result() -> None:
    schema = json.loads(bench.SCHEMA.read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"suite": "s", "results": [{"workload": "w"}]}, schema)


def test_bench_errors_are_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nworkloads:\n  - workload: nope\n")
    assert cli.main(["bench", str(path), "--device", "cpu"]) == 1
    assert f"{path}:3: workloads[0].workload: unknown workload 'nope'" in capsys.readouterr().err
    assert tf.workloads.names()
