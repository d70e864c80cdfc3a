"""YAML pipelines: every stage kind, includes with typed variables, every
error naming file, line and key, params files, the finder and user
overrides, the engine and the CLI over them."""

from __future__ import annotations

import json
import re
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import tilefuse as tf
from conftest import (
    assert_close,
    mutated,
    run_exported_sequence_with_wgpu_py,
    run_exported_with_wgpu_py,
)
from test_fuzz import CASES, fuzz_settings
from tilefuse import paramsfile
from tilefuse.bench import SCHEMA as BENCH_SCHEMA
from tilefuse.cli import main
from tilefuse.pipeline import SCHEMA, Pipeline, find, load_pipeline, locate, names
from tilefuse.stages import PipelineRun, run, workload_of
from tilefuse.yamlfile import YamlError

QUICK = "{warmup_ms: 2, rep_ms: 10}"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def softmax(rows: int = 32, cols: int = 128) -> tf.Workload:
    return tf.workloads.get("softmax", rows=rows, cols=cols)


def run_file(
    path: Path, workload: tf.Workload, device: tf.Device | None = None, **variables: Any
) -> PipelineRun:
    return run(load_pipeline(path, variables), workload, tf.Engine(device or tf.Device.cpu()))


def verify(state: PipelineRun) -> None:
    w = state.workload
    got = state.kernel()(*w.inputs(seed=7))
    got = got if isinstance(got, tuple) else (got,)
    for g, want in zip(got, w.expected(seed=7), strict=True):
        assert_close(g, want)


# --- shipped pipelines and the finder ------------------------------------------------------
def test_shipped_pipelines_load_and_the_schema_is_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))
    assert {"default", "cpu", "gpu", "tuned", "export", "build"} <= set(names())
    for name in names():
        p = load_pipeline(name, {"directory": "out"} if name == "export" else {})
        assert p.stages and all(s.kind in tf.pipeline.STAGES for s in p.stages)
        assert p.description


def test_finder_picks_the_most_specific_and_the_user_directory_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert find("cpu", ["softmax", "reduction"]) == "cpu"
    assert find("gpu", ["matmul"]) == "gpu"
    monkeypatch.setenv("TILEFUSE_PIPELINES", str(tmp_path))
    write(
        tmp_path,
        "cpu-matmul.yaml",
        """
        version: 1
        description: mine, for matmuls on the CPU
        match: {device: [cpu], workload: [matmul]}
        stages: [inspect]
        """,
    )
    assert find("cpu", ["matmul", "matmul"]) == "cpu-matmul"
    assert find("cpu", ["softmax", "reduction"]) == "cpu"
    # a user file of a shipped name replaces it
    write(tmp_path, "cpu.yaml", "version: 1\ndescription: my cpu\nstages: [inspect]\n")
    assert load_pipeline("cpu").description == "my cpu"
    assert find("cpu", ["softmax"]) == "default"  # mine has no match: picked by name only


# --- stages -------------------------------------------------------------------------------
def test_inspect_select_schedule_benchmark_with_saved_files(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p.yaml",
        f"""
        version: 1
        stages:
          - inspect: {{save: out/inspection.json}}
          - select: {{heuristics: true, save: out/params.json}}
          - schedule: auto
          - benchmark: {{save: out/bench.json, numpy: true, measure: call, {QUICK[1:-1]}}}
        """,
    )
    state = run_file(path, softmax())
    assert json.loads((tmp_path / "out/inspection.json").read_text()) == state.inspection
    assert state.params_source == "default heuristic"
    assert state.bench is not None and state.bench.verification is not None
    assert state.bench.verification.passed and state.bench.numpy_seconds is not None
    saved = json.loads((tmp_path / "out/bench.json").read_text())
    assert saved["workload"] == softmax().key and saved["measure"] == "call"
    assert saved["environment"]["params_hash"] is None  # a built kernel, not params
    assert len(saved["environment"]["schedule_hash"]) == 16
    assert [f.name for f in state.files] == ["inspection.json", "params.json", "bench.json"]
    assert [line.split(":")[0] for line in state.log] == [
        "inspect",
        "select",
        "schedule",
        "benchmark",
    ]
    verify(state)


def test_params_files_round_trip(tmp_path: Path) -> None:
    w, device = softmax(), tf.Device.cpu()
    params = w.payload.heuristics(device=device).to_dict()
    params["unroll_factor_reduction"] = 2
    saved = paramsfile.save(tmp_path / "p.json", w.payload, device, [params], "by hand")
    document = json.loads(saved.read_text())
    assert document["fusion"] == w.payload.fingerprint
    assert document["device"]["fingerprint"] == device.fingerprint
    assert paramsfile.load(saved, w.payload, device) == [params]
    path = write(
        tmp_path, "use.yaml", "version: 1\nstages: [{select: {file: p.json}}, {schedule: auto}]\n"
    )
    state = run_file(path, w)
    assert state.params == [params] and state.params_source.startswith("file ")
    assert state.schedules is not None
    assert state.schedules[0].trace == w.payload._auto_schedule(params, device).trace
    verify(state)


def test_a_params_file_for_another_fusion_or_device_warns_and_falls_back(
    tmp_path: Path,
) -> None:
    device = tf.Device.cpu()
    other = softmax(cols=256)
    paramsfile.save(tmp_path / "p.json", other.payload, device, [other.payload.heuristics()])
    path = write(
        tmp_path,
        "use.yaml",
        "version: 1\nstages: [{select: {file: p.json, fallback: heuristics}}, schedule]\n",
    )
    with pytest.warns(RuntimeWarning, match=r"p.json: params picked for another fusion"):
        state = run_file(path, softmax())
    assert "fallback" in state.params_source and "default heuristic" in state.params_source
    verify(state)
    # the right fusion, but written on another device
    w = softmax()
    saved = paramsfile.save(tmp_path / "p.json", w.payload, device, [w.payload.heuristics()])
    document = json.loads(saved.read_text())
    document["device"] = {"fingerprint": "0" * 16, "name": "a GPU"}
    saved.write_text(json.dumps(document))
    with pytest.warns(RuntimeWarning, match="another device 'a GPU'"):
        run_file(path, w)
    saved.write_text('{"format": "something else"}')
    with pytest.raises(tf.ParamsError, match=r"p.json: format: not a params file"):
        run_file(path, w)


@pytest.mark.usefixtures("own_cache")
def test_select_from_the_cache_by_tuning_and_by_a_selector(tmp_path: Path) -> None:
    write(
        tmp_path,
        "my_selectors.py",
        """
        def wide(inspection, device):
            assert inspection[0]["scheduler"] == "reduction"
            import tilefuse
            w = tilefuse.workloads.get("softmax", rows=32, cols=128)
            params = w.payload.heuristics(device=device).to_dict()
            params["unroll_factor_reduction"] = 4
            return params
        """,
    )
    path = write(
        tmp_path,
        "p.yaml",
        """
        version: 1
        variables: {selector: {type: str}}
        stages:
          - select: {selector: "my_selectors:${selector}"}
          - schedule: auto
        """,
    )
    state = run_file(path, softmax(), selector="wide")
    assert state.params is not None and state.params[0]["unroll_factor_reduction"] == 4
    assert state.params_source == "selector my_selectors:wide"
    verify(state)
    # tuning stores the winner; the cache selector then serves it
    tuned = write(
        tmp_path,
        "tuned.yaml",
        "version: 1\nstages: [{select: {tune: {trials: 3, seed: 1}}}, schedule]\n",
    )
    w = softmax(rows=16, cols=64)
    state = run_file(tuned, w)
    assert re.fullmatch(r"tune \w+, \d+ trials, .*x the default", state.params_source)
    verify(state)
    cached = run_file(write(tmp_path, "c.yaml", "version: 1\nstages: [select, schedule]\n"), w)
    assert cached.params_source.startswith("cache: ")
    assert cached.params == state.params


def test_schedule_by_trace_and_by_function_then_apply(tmp_path: Path) -> None:
    w, device = softmax(), tf.Device.cpu()
    auto = w.payload._auto_schedule(w.payload.heuristics(device=device), device)
    (tmp_path / "auto.json").write_text(auto.trace)
    last = auto.get_loops("y")[-1]
    write(
        tmp_path,
        "by_hand.py",
        """
        def initial(fusion, device):
            return fusion.create_schedule()

        def split_last(schedule):
            schedule.split(schedule.get_loops("y")[-1], [None, 4])
        """,
    )
    path = write(
        tmp_path,
        "p.yaml",
        f"""
        version: 1
        variables: {{how: {{type: str}}}}
        stages:
          - schedule: {{trace: auto.json}}
          - apply:
              primitives: [{{primitive: split, loop: {last.id}, factors: [null, 8]}}]
          - apply: {{function: "by_hand:${{how}}"}}
        """,
    )
    state = run_file(path, w, how="split_last")
    assert state.schedules is not None
    records = json.loads(state.schedules[0].trace)
    assert records[: len(json.loads(auto.trace))] == json.loads(auto.trace)
    assert [r["factors"] for r in records[-2:]] == [[None, 8], [None, 4]]
    assert state.log[1:] == [
        "apply: 1 primitive(s) on segment 0",
        "apply: function " + "by_hand:split_last on segment 0",
    ]
    verify(state)
    by_hand = write(
        tmp_path, "h.yaml", "version: 1\nstages: [{schedule: {function: 'by_hand:initial'}}]\n"
    )
    state = run_file(by_hand, w)
    assert state.schedules is not None and json.loads(state.schedules[0].trace) == []
    verify(state)


def test_apply_on_a_segmented_fusion_names_the_segment(tmp_path: Path) -> None:
    w = tf.workloads.get("attention", seq=16, dim=8)
    path = write(
        tmp_path,
        "p.yaml",
        """
        version: 1
        stages: [schedule, {apply: {primitives: []}}]
        """,
    )
    with pytest.raises(YamlError, match=r"p.yaml:2: stages\[1\].apply.segment: name one of the 3"):
        run_file(path, w)
    write(
        tmp_path,
        "p.yaml",
        "version: 1\nstages: [schedule, {apply: {primitives: [], segment: 1}}]\n",
    )
    verify(run_file(path, w))


@pytest.mark.parametrize(
    "workload",
    [
        pytest.param(lambda: tf.workloads.get("softmax", rows=8, cols=256), id="softmax"),
        pytest.param(lambda: tf.workloads.get("attention", seq=16, dim=8), id="attention"),
    ],
)
def test_emitted_files_run_unchanged_through_wgpu_py(
    tmp_path: Path, gpu: tf.Device, workload: Any
) -> None:
    w = workload()
    state = run(load_pipeline("export", {"directory": str(tmp_path / "out")}), w, tf.Engine(gpu))
    (manifest,) = state.files
    spec = json.loads(manifest.read_text())
    runner = (
        run_exported_sequence_with_wgpu_py
        if spec["format"] == "tilefuse.sequence"
        else run_exported_with_wgpu_py
    )
    got = runner(manifest, *w.inputs())
    for g, want in zip(got, w.expected(), strict=True):
        assert_close(g, want)


# --- includes and variables ---------------------------------------------------------------
def test_includes_with_typed_variables(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    write(
        tmp_path / "lib",
        "timed.yaml",
        """
        version: 1
        variables:
          rep_ms: {type: float, default: 10}
          check: {type: bool, default: true}
          out: {type: path, default: results}
        stages:
          - benchmark: {rep_ms: "${rep_ms}", warmup_ms: 1, check: "${check}", save: "${out}/b.json"}
        """,
    )
    path = write(
        tmp_path,
        "top.yaml",
        """
        version: 1
        variables:
          fast: {type: int, default: 5}
        stages:
          - select: heuristics
          - include: {pipeline: lib/timed.yaml, with: {rep_ms: "${fast}", out: here}}
          - include: lib/timed.yaml
        """,
    )
    p = load_pipeline(path)
    first, second = p.stages[1], p.stages[2]
    assert first.options["rep_ms"] == 5.0 and isinstance(first.options["rep_ms"], float)
    assert first.options["check"] is True
    # a path given by the includer is relative to the includer, a default to its own file
    assert first.options["save"] == f"{tmp_path}/here/b.json"
    assert second.options["save"] == f"{tmp_path}/lib/results/b.json"
    assert (first.path.name, first.line) == ("timed.yaml", 7)
    assert load_pipeline(path, {"fast": "7"}).stages[1].options["rep_ms"] == 7.0
    assert "timed.yaml:7" in p.to_yaml()
    state = run(p, softmax(), tf.Engine(tf.Device.cpu()))
    assert (tmp_path / "here/b.json").is_file() and (tmp_path / "lib/results/b.json").is_file()
    assert state.bench is not None


def test_a_variable_inside_a_string_is_text_and_dollars_escape(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p.yaml",
        """
        version: 1
        variables: {n: {type: int, default: 3}, on: {type: bool, default: false}}
        stages:
          - emit: {directory: "out-${n}-${on}-$$HOME", name: k}
        """,
    )
    (stage,) = load_pipeline(path).stages
    assert stage.options["directory"] == "out-3-false-$HOME"


# --- errors name the file, the line and the key --------------------------------------------
ERRORS = {
    "unknown stage": (
        "version: 1\nstages:\n  - select: heuristics\n  - sellect: cache\n",
        r"p.yaml:4: stages\[1\]: unknown stage 'sellect'; stages are inspect",
    ),
    "missing file": (
        "version: 1\nstages:\n  - select: {file: nope.json}\n",
        r"p.yaml:3: stages\[0\].select.file: no file .*nope.json",
    ),
    "missing trace": (
        "version: 1\nstages:\n  - schedule:\n      trace: [a.json]\n",
        r"p.yaml:4: stages\[0\].schedule.trace: no file .*a.json",
    ),
    "unresolved variable": (
        "version: 1\nstages:\n  - emit: {directory: '${nope}'}\n",
        r"p.yaml:3: stages\[0\].emit.directory: unresolved variable \$\{nope\} \(declared: none",
    ),
    "bare dollar variable": (
        "version: 1\nvariables: {d: {type: path, default: x}}\n"
        "stages:\n  - emit: {directory: $d}\n",
        r"p.yaml:4: stages\[0\].emit.directory: write \$\{d\} for a variable",
    ),
    "wrong option type": (
        "version: 1\nstages:\n  - benchmark:\n      rep_ms: fast\n",
        r"p.yaml:4: stages\[0\].benchmark.rep_ms: 'fast' is not of type 'number'",
    ),
    "unknown option": (
        "version: 1\nstages:\n  - emit: {directory: d,\n           nmae: k}\n",
        r"p.yaml:4: stages\[0\].emit: Additional properties are not allowed \('nmae'",
    ),
    "wrong enum": (
        "version: 1\nstages:\n  - select: {tune: {effort: hard}}\n",
        r"p.yaml:3: stages\[0\].select.tune.effort: 'hard' is not one of",
    ),
    "wrong version": ("version: 2\nstages: [inspect]\n", r"p.yaml:1: version: must be 1"),
    "no stages": ("version: 1\nstages: []\n", r"p.yaml:2: stages: \[\] should be non-empty"),
    "unknown top key": (
        "version: 1\nstages: [inspect]\nstagse: []\n",
        r"p.yaml:3: Additional properties are not allowed \('stagse'",
    ),
    "variable without a type": (
        "version: 1\nvariables:\n  n: {default: 1}\nstages: [inspect]\n",
        r"p.yaml:3: variables.n: 'type' is a required property",
    ),
    "variable default of a wrong type": (
        "version: 1\nvariables:\n  n: {type: int, default: many}\nstages: [inspect]\n",
        r"p.yaml:3: variables.n: expects int, got 'many'",
    ),
    "variable not among its choices": (
        "version: 1\nvariables:\n  e: {type: str, default: hard, choices: [quick]}\n"
        "stages: [inspect]\n",
        r"p.yaml:3: variables.e: 'hard' is not one of \['quick'\]",
    ),
    "required variable": (
        "version: 1\nvariables:\n  out: {type: path}\nstages: [inspect]\n",
        r"p.yaml:3: variables.out: required \(type path\) and not given",
    ),
    "selector that does not import": (
        "version: 1\nstages:\n  - select: {selector: 'no_such_module:pick'}\n",
        r"p.yaml:3: stages\[0\].select.selector: cannot import 'no_such_module'",
    ),
    "function that does not exist": (
        "version: 1\nstages:\n  - schedule: {function: 'json:no_such_function'}\n",
        r"p.yaml:3: stages\[0\].schedule.function: json has no 'no_such_function'",
    ),
    "include of a missing pipeline": (
        "version: 1\nstages:\n  - inspect\n  - include: nope.yaml\n",
        r"p.yaml:4: stages\[1\].include: no pipeline file .*nope.yaml",
    ),
    "include of a name the file system refuses": (
        f"version: 1\nstages:\n  - include: {'a' * 300}\n",
        r"p.yaml:3: stages\[0\].include: .*File name too long",
    ),
    "include cycle": (
        "version: 1\nstages:\n  - include: p.yaml\n",
        r"p.yaml:3: stages\[0\].include: includes itself: p.yaml -> p.yaml",
    ),
    "include with an unknown variable": (
        "version: 1\nstages:\n  - include: {pipeline: build, with: {selectr: cache}}\n",
        r"build.yaml: variables: .*p.yaml:3: stages\[0\].include.with: no variable 'selectr'",
    ),
    "include with a wrong type": (
        "version: 1\nstages:\n  - include: {pipeline: build, with: {selector: 3}}\n",
        r"build.yaml:7: variables.selector: expects str, got 3 \(given by .*p.yaml:3: "
        r"stages\[0\].include.with\)",
    ),
    "include with a value not among the choices": (
        "version: 1\nstages:\n  - include: {pipeline: build, with: {selector: tuned}}\n",
        r"build.yaml:9: variables.selector: 'tuned' is not one of .* \(given by .*p.yaml:3: ",
    ),
    "variables that are not a mapping": (
        "version: 1\nvariables:\nstages: [inspect]\n",
        r"p.yaml:2: variables: None is not of type 'object'",
    ),
    "unknown workload": (
        "version: 1\nworkload:\n  name: sofmax\nstages: [inspect]\n",
        r"p.yaml:3: workload.name: unknown workload 'sofmax'",
    ),
    "bad workload size": (
        "version: 1\nworkload:\n  name: softmax\n  sizes: {rows: -4}\nstages: [inspect]\n",
        r"p.yaml:4: workload.sizes.rows: .*rows",
    ),
    "not YAML": ("version: 1\nstages: [inspect\n", r"p.yaml:3: while parsing"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_every_error_names_the_file_line_and_key(tmp_path: Path, case: str) -> None:
    text, message = ERRORS[case]
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(YamlError, match=message):
        p = load_pipeline(path)
        workload_of(p)


def test_values_given_by_a_caller_are_checked_by_type(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "version: 1\nvariables: {n: {type: int}}\nstages: [inspect]\n")
    assert load_pipeline(path, {"n": "12"}).variables == {"n": 12}
    with pytest.raises(YamlError, match=r"p.yaml:2: variables.n: expects int, got 'twelve'"):
        load_pipeline(path, {"n": "twelve"})
    with pytest.raises(YamlError, match=r"variables: variables given to .*: no variable 'm'"):
        load_pipeline(path, {"n": 1, "m": 2})


def test_errors_while_running_name_the_stage(tmp_path: Path) -> None:
    write(tmp_path, "bad.py", "def pick(inspection, device):\n    raise ValueError('no idea')\n")
    path = write(tmp_path, "p.yaml", "version: 1\nstages:\n  - select: {selector: 'bad:pick'}\n")
    with pytest.raises(
        YamlError,
        match=r"p.yaml:3: stages\[0\].select.selector: bad:pick raised ValueError: no idea",
    ):
        run_file(path, softmax())
    (tmp_path / "t.json").write_text('[{"primitive": "split", "loop": 999, "factors": [2]}]')
    path = write(tmp_path, "p.yaml", "version: 1\nstages:\n  - schedule: {trace: t.json}\n")
    with pytest.raises(YamlError, match=r"p.yaml:3: stages\[0\].schedule.trace: ScheduleError"):
        run_file(path, softmax())
    path = write(tmp_path, "p.yaml", "version: 1\nstages:\n  - apply: {primitives: []}\n")
    with pytest.raises(YamlError, match=r"p.yaml:3: stages\[0\].apply: needs a schedule stage"):
        run_file(path, softmax())


# --- the engine and the CLI over pipelines ----------------------------------------------
def test_engine_lowers_and_compares_pipelines(tmp_path: Path) -> None:
    engine, w = tf.Engine(tf.Device.cpu()), softmax()
    k = engine.lower(w, pipeline="default")
    assert engine.lower(w, pipeline=load_pipeline("default")) is k
    with pytest.raises(ValueError, match="params or a pipeline"):
        engine.lower(w, {}, pipeline="default")
    mine = engine.lower(w)
    results = engine.compare(
        w,
        {"params": None, "pipeline": "cpu", "kernel": mine},
        budget=tf.timing.Budget(warmup=0.002, rep=0.01, min_repeat=3),
        rounds=2,
    )
    env = {n: r.environment for n, r in results.items()}
    assert env["params"]["params_hash"] and env["params"]["pipeline_hash"] is None
    assert env["pipeline"]["pipeline_hash"] == load_pipeline("cpu").digest
    assert env["kernel"]["params_hash"] is None
    # the same params make the same schedule, whichever way they came
    assert len({e["schedule_hash"] for e in env.values()}) == 1
    assert all(r.verification is not None and r.verification.passed for r in results.values())
    np.testing.assert_array_equal(engine.execute(w, k)[0], engine.execute(w)[0])


def test_cli_run_inspect_and_pipeline_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        "p.yaml",
        f"""
        version: 1
        description: mine
        workload: {{name: softmax, sizes: {{rows: 16, cols: 64}}}}
        variables: {{out: {{type: path}}}}
        stages:
          - select: {{heuristics: true, save: "${{out}}/params.json"}}
          - schedule: auto
          - emit: {{directory: "${{out}}", name: softmax}}
          - benchmark: {QUICK}
        """,
    )
    out = tmp_path / "made"
    assert main(["run", str(path), "--set", f"out={out}", "--json", str(tmp_path / "r.json")]) == 0
    done = json.loads((tmp_path / "r.json").read_text())
    assert done["workload"] == "softmax(cols=64,rows=16)"
    assert sorted(p.name for p in out.iterdir()) == ["params.json", "softmax.json", "softmax.wgsl"]
    assert done["benchmark"]["verified"] is True
    assert main(["run", "--workload", "chain", "--size", "rows=8", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["inspect", "softmax", "--size", "rows=8", "--size", "cols=32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["scheduler"] == "reduction"
    assert main(["pipeline", "validate", str(path), "--set", "out=x"]) == 0
    assert "ok (4 stages" in capsys.readouterr().out
    assert main(["pipeline", "validate", str(path)]) == 1
    assert "p.yaml:4: variables.out: required" in capsys.readouterr().err
    assert main(["pipeline", "show", "export", "--set", "directory=x"]) == 0
    shown = capsys.readouterr().out
    assert "build.yaml:13" in shown and "emit:" in shown
    assert main(["pipeline", "list"]) == 0
    assert "tuned" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="'softmax' is a workload: tilefuse run --workload"):
        main(["run", "softmax"])
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "example:" in capsys.readouterr().out


def test_bench_takes_a_pipeline(tmp_path: Path) -> None:
    suite = write(
        tmp_path,
        "s.yaml",
        "version: 1\nworkloads:\n  - workload: row_sum\n    sizes: {rows: 16, cols: [32, 64]}\n",
    )
    out = tmp_path / "b.json"
    args = ["bench", str(suite), "--pipeline", "cpu", "--device", "cpu", "--quiet"]
    assert main([*args, "--warmup", "0.002", "--rep", "0.01", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    jsonschema.validate(document, json.loads(BENCH_SCHEMA.read_text()))
    results = document["results"]
    assert [r["variant"] for r in results] == ["s/cpu", "s/cpu"]
    assert all(r["environment"]["pipeline_hash"] for r in results)


def test_pipeline_reprs_and_digest_follow_the_files_read(tmp_path: Path) -> None:
    w, device = softmax(), tf.Device.cpu()
    paramsfile.save(tmp_path / "p.json", w.payload, device, [w.payload.heuristics()])
    path = write(tmp_path, "p.yaml", "version: 1\nstages: [{select: {file: p.json}}]\n")
    p = load_pipeline(path)
    assert isinstance(p, Pipeline) and repr(p) == "<Pipeline p: select>"
    before = p.digest
    params = w.payload.heuristics().to_dict()
    params["unroll_factor_reduction"] = 2
    paramsfile.save(tmp_path / "p.json", w.payload, device, [params])
    assert p.digest != before


SHIPPED = {name: yaml.safe_load(locate(name).read_text()) for name in names()}


@fuzz_settings(CASES)
@given(data=st.data(), name=st.sampled_from(sorted(SHIPPED)))
def test_a_mangled_pipeline_file_loads_or_says_what_is_wrong(
    data: st.DataObject, name: str
) -> None:
    # A shipped pipeline with values replaced, removed or added; it
    # includes other shipped pipelines by name.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mangled.yaml"
        path.write_text(yaml.safe_dump(data.draw(mutated(SHIPPED[name]))))
        try:
            load_pipeline(path)
        except YamlError as e:
            # where it is wrong, or who gave a shipped include a wrong value
            assert re.search(rf"{re.escape(tmp)}/\w+\.yaml:\d+: ", str(e)), e
