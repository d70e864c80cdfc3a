"""The package surface: explicit exports, a stub that matches the compiled
module, and the README's quickstart."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import numpy as np
import pytest

import tilefuse
import tilefuse._native
from conftest import assert_close

ROOT = Path(__file__).resolve().parent.parent


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        n
        for n, v in vars(tilefuse).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert set(tilefuse.__all__) - {"__version__"} == public
    for name in tilefuse.__all__:
        assert hasattr(tilefuse, name), name


def test_native_stub_matches_the_compiled_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "tilefuse._native"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_exceptions_form_one_hierarchy() -> None:
    for exc in (tilefuse.FusionError, tilefuse.ParamsError, tilefuse.ScheduleError):
        assert issubclass(exc, tilefuse.TilefuseError) and issubclass(exc, ValueError)
        assert exc.__module__ == "tilefuse"
    assert issubclass(tilefuse.DeviceError, tilefuse.TilefuseError)
    assert issubclass(tilefuse.DeviceError, RuntimeError)
    assert tilefuse.FusionError is tilefuse._native.FusionError


def test_every_params_struct_has_a_class() -> None:
    names = {name for name, _ in tilefuse._native.params_structs()}
    classes = {
        n
        for n in tilefuse.__all__
        if isinstance(getattr(tilefuse, n), type)
        and issubclass(getattr(tilefuse, n), tilefuse.ParamsStruct)
    }
    assert names == classes - {"ParamsStruct", "HeuristicParams"}


def test_demo_runs() -> None:
    """The README's main command must keep working."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "saved and loaded back as MatmulParams, equal: True" in result.stdout


@pytest.mark.parametrize(
    "page", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/*.md"))]
)
def test_the_python_examples_of_the_readme_and_docs_run(page: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)
    assert blocks or page != "README.md", "the README has no Python example"
    for code in blocks:
        exec(compile(code, page, "exec"), {})


def test_every_device_argument_takes_a_name(gpu: tilefuse.Device, rng: np.random.Generator) -> None:
    f = tilefuse.Fusion()
    x = f.input((33, 70), "f32", name="x")
    f.output((x * 2.0).exp())
    a = rng.standard_normal((33, 70)).astype(np.float32)
    for name, device in (("cpu", tilefuse.Device.cpu()), ("gpu", gpu)):
        assert tilefuse.as_device(name).fingerprint == device.fingerprint
        by_name = f.heuristics(device=name, cache=False)
        assert by_name.to_dict() == f.heuristics(device=device, cache=False).to_dict()
        assert_close(f.schedule(device=name)(a), np.exp(a.astype(np.float64) * 2))
        assert f.create_schedule().build(name).device.fingerprint == device.fingerprint
        assert tilefuse.Engine(name).device.fingerprint == device.fingerprint
    assert tilefuse.as_device(gpu) is gpu
    assert tilefuse.Device("cpu").fingerprint == tilefuse.Device.cpu().fingerprint
    assert tilefuse.Device("gpu").fingerprint == gpu.fingerprint
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        tilefuse.Device("cuda")
    with pytest.raises(TypeError, match=r"Device\(\): expected one of .* got int"):
        tilefuse.Device(0)  # type: ignore[arg-type]
    assert tilefuse.as_device(None).fingerprint == tilefuse.Device.default().fingerprint
    with pytest.raises(ValueError, match="unknown device 'cuda'; expected 'cpu', 'gpu', 'default'"):
        f.heuristics(device="cuda")
    with pytest.raises(TypeError, match=r"device: expected .* got int"):
        tilefuse.Engine(0)  # type: ignore[arg-type]


def test_to_json_takes_one_keyword_indent_everywhere() -> None:
    """Fusion, params, tune results and bench results serialize alike:
    ``to_json(*, indent=None)``, one line unless indented."""
    f = tilefuse.Fusion()
    x = f.input((8, 16), "f32", name="x")
    f.output((x - x.max(axis=1, keepdims=True)).exp())
    cpu = tilefuse.Device.cpu()
    r = tilefuse.tune(f, cpu, trials=2, cache=False, progress=False)
    budget = tilefuse.timing.Budget(0, 0.01)
    bench = tilefuse.Engine(cpu).benchmark(tilefuse.as_workload(f), budget=budget)
    for obj in (f, f.heuristics(device=cpu, cache=False), r, bench):
        (indent,) = inspect.signature(obj.to_json).parameters.values()
        assert (indent.name, indent.kind, indent.default) == ("indent", indent.KEYWORD_ONLY, None)
        one_line = obj.to_json()
        assert "\n" not in one_line
        assert json.loads(obj.to_json(indent=2)) == json.loads(one_line)


def test_tune_takes_its_options_by_keyword_and_names_their_values() -> None:
    params = list(inspect.signature(tilefuse.tune).parameters.values())
    assert [p.name for p in params[:2]] == ["fusion", "device"]
    assert all(p.kind is p.KEYWORD_ONLY for p in params[2:]), params
    assert typing.get_args(tilefuse.Effort) == ("none", "quick", "full")
    assert "surrogate" in typing.get_args(tilefuse.Strategy)
    assert typing.get_args(tilefuse.DeviceName) == tuple(tilefuse.device.DEVICE_NAMES)


def test_trials_are_typed_records() -> None:
    f = tilefuse.Fusion()
    x = f.input((8, 16), "f32", name="x")
    f.output(x.exp())
    r = tilefuse.tune(f, tilefuse.Device.cpu(), trials=3, cache=False, progress=False)
    assert r.trials and all(isinstance(t, tilefuse.Trial) for t in r.trials)
    assert r.trials[0].origin == "default"
    assert {t.status for t in r.trials} <= set(typing.get_args(tilefuse.TrialStatus))
    assert {t.origin for t in r.trials} <= set(typing.get_args(tilefuse.TrialOrigin))
    first = json.loads(r.to_json())["trials"][0]
    assert tilefuse.Trial.from_dict(first) == r.trials[0]
