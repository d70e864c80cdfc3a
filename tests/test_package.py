"""The package surface: explicit exports, a stub that matches the compiled
module, and the README's quickstart."""

from __future__ import annotations

import re
import subprocess
import sys
import types
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


def test_readme_quickstart_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "the README has no Python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


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
