"""The package surface: explicit exports, a stub that matches the compiled
module, and the README's quickstart."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import tilefuse
import tilefuse._native

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
