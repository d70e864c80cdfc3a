"""Benchmark suites: YAML files listing workloads and size sweeps.

    version: 1
    description: what the suite is for
    workloads:
      - workload: softmax
        sizes: {rows: 256, cols: [256, 1024]}   # a list sweeps
      - workload: matmul
        sizes: {m: [128, 256], n: [128, 256], k: [128, 256]}
        zip: true                               # lists advance together

Lists are crossed (every combination) unless ``zip: true``. The package
ships ``smoke``, ``memory`` and ``matmul`` (:func:`names`); a name or a path
works wherever a suite is asked for. Every error names the file, the line
and the key.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from . import workloads
from .workload import Workload
from .yamlfile import Located, YamlError, load

__all__ = ["Suite", "load_suite", "located_workload", "names"]

_SHIPPED = resources.files("tilefuse") / "suites"


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    #: Every workload of every sweep, in file order.
    workloads: list[Workload]


def names() -> list[str]:
    """The suites shipped with the package."""
    return sorted(
        p.name.removesuffix(".yaml") for p in _SHIPPED.iterdir() if p.name.endswith(".yaml")
    )


def load_suite(name_or_path: str | Path, *, dtype: str | None = None) -> Suite:
    """A shipped suite by name, or a suite file; with ``dtype``, every
    workload in that float dtype instead of the one the file gives."""
    path = Path(name_or_path)
    if not path.exists() and str(name_or_path) in names():
        path = Path(str(_SHIPPED / f"{name_or_path}.yaml"))
    if not path.exists():
        raise FileNotFoundError(f"no suite file {path} (shipped suites: {', '.join(names())})")
    doc = load(path)
    top = _mapping(path, doc, "", {"version", "description", "workloads"})
    if top.get("version") != 1:
        raise YamlError(path, top.lines.get("version", top.line), "version", "must be 1")
    entries = top.get("workloads")
    if not isinstance(entries, list) or not entries:
        raise YamlError(
            path, top.lines.get("workloads", top.line), "workloads", "must be a non-empty list"
        )
    found = [w for i, e in enumerate(entries) for w in _entry(path, e, f"workloads[{i}]")]
    if dtype is not None:
        found = [workloads.get(w.name, **{**w.sizes, "dtype": dtype}) for w in found]
    return Suite(path.stem, str(top.get("description", "")), found)


def _mapping(path: Path, value: Any, key: str, allowed: set[str]) -> Located:
    if not isinstance(value, Located):
        raise YamlError(path, None, key or "document", "must be a mapping")
    for k in value:
        if k not in allowed:
            where = f"{key}.{k}" if key else k
            raise YamlError(
                path,
                value.lines[k],
                where,
                f"unknown key; expected one of {', '.join(sorted(allowed))}",
            )
    return value


def _entry(path: Path, value: Any, key: str) -> list[Workload]:
    entry = _mapping(path, value, key, {"workload", "sizes", "zip"})
    sizes = entry.get("sizes", Located(line=entry.line, lines={}))
    if not isinstance(sizes, Located):
        raise YamlError(path, entry.lines["sizes"], f"{key}.sizes", "must be a mapping")
    return [
        located_workload(path, entry, "workload", key, combo)
        for combo in _sweep(path, sizes, bool(entry.get("zip", False)), f"{key}.sizes")
    ]


def located_workload(
    path: Path, entry: Located, name_key: str, key: str, sizes: dict[str, Any]
) -> Workload:
    """The built-in workload ``entry[name_key]`` with ``sizes``; an unknown
    name or a bad size is a :class:`YamlError` at its line in ``path``."""
    name = entry.get(name_key)
    if name not in workloads.names():
        raise YamlError(
            path,
            entry.lines.get(name_key, entry.line),
            f"{key}.{name_key}".lstrip("."),
            f"unknown workload {name!r}; built in: {', '.join(workloads.names())}",
        )
    given = entry.get("sizes")
    lines = given if isinstance(given, Located) else Located(entry.line)
    try:
        return workloads.get(name, **sizes)
    except (TypeError, ValueError) as e:
        # the workload's message names the size: "size cols must be ..."
        named = re.search(r"size '?(\w+)", str(e))
        bad = named.group(1) if named and named.group(1) in sizes else None
        where = f"{key}.sizes".lstrip(".") + (f".{bad}" if bad else "")
        raise YamlError(path, lines.lines.get(bad or "", lines.line), where, str(e)) from e


def _sweep(path: Path, sizes: Located, zipped: bool, key: str) -> list[dict[str, Any]]:
    """Every combination of the list-valued sizes (zipped or crossed)."""
    axes = {k: v if isinstance(v, list) else [v] for k, v in sizes.items()}
    for k, values in axes.items():
        if not values:
            raise YamlError(path, sizes.lines[k], f"{key}.{k}", "an empty list sweeps nothing")
    if zipped:
        lengths = {len(v) for v in axes.values() if len(v) > 1}
        if len(lengths) > 1:
            raise YamlError(
                path, sizes.line, key, f"zip needs lists of one length, got {sorted(lengths)}"
            )
        n = lengths.pop() if lengths else 1
        return [{k: v[i] if len(v) > 1 else v[0] for k, v in axes.items()} for i in range(n)]
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]
