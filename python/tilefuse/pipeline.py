"""Pipelines (seed 002): YAML descriptors of the stages that take a
workload from its payload to a kernel and on to files and timings.

    version: 1
    description: tune, keep the params, export the kernel
    variables:
      effort: {type: str, default: quick, choices: [none, quick, full]}
      out: {type: path}                       # no default: required
    workload: {name: softmax, sizes: {rows: 1024, cols: 1024}}
    stages:
      - inspect
      - select: {tune: {effort: "${effort}"}, save: "${out}/params.json"}
      - schedule: auto
      - include: {pipeline: bench-call, with: {rep_ms: 200}}
      - emit: {directory: "${out}", name: softmax}

Stages run in order (:mod:`tilefuse.stages` says what each does):
``inspect``, ``select`` (``heuristics``, ``cache``, ``{file: ...}``,
``{tune: {...}}``, ``{selector: module:function}``), ``schedule``
(``auto``, ``{trace: ...}``, ``{function: module:function}``), ``apply``,
``emit`` and ``benchmark``; ``include`` splices in another pipeline's
stages with values for its variables. ``${name}`` is a variable: a whole
value keeps the variable's type, inside a string it is text; ``$$`` is a
literal ``$``. Every relative path is relative to the file that names it
(a ``path`` variable given on the command line, to the working directory).

Loading checks everything that can be checked before running: the schema
(``schemas/pipeline.schema.json``), every stage name, every variable
(declared, typed, given when required), every file read (it exists, or an
earlier stage writes it) and every ``module:function`` (it imports). Every
error names the file, the line and the key; nothing unknown is passed on
as text.

Named pipelines ship with the package (:func:`names`); a directory in
``TILEFUSE_PIPELINES`` (``os.pathsep``-separated) or the user's config
directory (``<user config>/tilefuse/pipelines``) overrides them by file
name. :func:`find` picks one by device kind and workload.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .yamlfile import Located, LocatedList, YamlError, line_of, load

__all__ = [
    "SCHEMA",
    "STAGES",
    "Pipeline",
    "Stage",
    "directories",
    "find",
    "load_pipeline",
    "locate",
    "names",
    "resolve_callable",
]

#: The stage kinds, in the order they usually run.
STAGES = ("inspect", "select", "schedule", "apply", "emit", "benchmark")

#: The JSON Schema of a pipeline file (after variables are substituted).
SCHEMA = Path(__file__).parent / "schemas" / "pipeline.schema.json"

_SHIPPED = resources.files("tilefuse") / "pipelines"
_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "str": str,
    "bool": bool,
    "path": str,
}
_VARIABLE = re.compile(r"\$(\$|\{(\w*)\}|\w+)")


@dataclass(frozen=True)
class Stage:
    """One stage, with where it was written."""

    kind: str
    #: The options after substitution (``None`` for a bare stage name).
    options: Any
    #: The file and line it came from (an included file's for its stages).
    path: Path
    line: int
    #: Its place in its file, e.g. ``stages[2]``.
    key: str

    def error(self, message: str, option: str = "") -> YamlError:
        """An error naming this stage's file, line and key."""
        where = f"{self.key}.{self.kind}" + (f".{option}" if option else "")
        line = line_of(self.options, option) if option else None
        return YamlError(self.path, line or self.line, where, message)

    def file(self, relative: str) -> Path:
        """A path the stage names, relative to its file."""
        return self.path.parent / relative


@dataclass(frozen=True)
class Pipeline:
    """A loaded pipeline: includes spliced in, variables substituted."""

    name: str
    path: Path
    description: str
    stages: tuple[Stage, ...]
    #: The values of the top file's variables.
    variables: dict[str, Any] = field(default_factory=dict)
    #: ``{"device": [...], "workload": [...]}`` for :func:`find`.
    match: dict[str, list[str]] = field(default_factory=dict)
    #: The ``workload:`` mapping, where the file names one.
    workload: Located | None = None

    @property
    def digest(self) -> str:
        """16 hex digits of the stages as run (kinds and options) and of
        the files they read, for caching what the pipeline builds."""
        h = hashlib.sha256()
        for s in self.stages:
            h.update(json.dumps([s.kind, s.options], sort_keys=True, default=str).encode())
            for _, relative in _reads(s):
                target = s.file(relative)
                h.update(target.read_bytes() if target.is_file() else str(target).encode())
        return h.hexdigest()[:16]

    def to_yaml(self) -> str:
        """The pipeline as run: one file, includes spliced in, variables
        substituted, each stage commented with where it came from."""
        head: dict[str, Any] = {"version": 1, "description": self.description}
        if self.workload is not None:
            head["workload"] = _builtin(self.workload)
        lines = [yaml.safe_dump(head, sort_keys=False, width=1000).rstrip(), "stages:"]
        for s in self.stages:
            lines.append(f"  # {s.path.name}:{s.line}")
            body = s.kind if s.options is None else {s.kind: _builtin(s.options)}
            item = yaml.safe_dump([body], sort_keys=False, default_flow_style=False).rstrip()
            lines.extend(f"  {line}" for line in item.splitlines())
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        kinds = ", ".join(s.kind for s in self.stages)
        return f"<Pipeline {self.name}: {kinds}>"


# --- finding pipelines ----------------------------------------------------------------
def directories() -> list[Path]:
    """Where named pipelines are looked up, first match wins: each entry
    of ``TILEFUSE_PIPELINES``, the user's ``<config>/tilefuse/pipelines``,
    then the pipelines shipped with the package."""
    import platformdirs

    given = [Path(p) for p in os.environ.get("TILEFUSE_PIPELINES", "").split(os.pathsep) if p]
    user = Path(platformdirs.user_config_dir("tilefuse")) / "pipelines"
    return [*given, user, Path(str(_SHIPPED))]


def names() -> list[str]:
    """Every named pipeline (shipped, and in the user's directories)."""
    found = {p.stem for d in directories() if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(found)


def locate(name_or_path: str | os.PathLike[str], relative_to: Path | None = None) -> Path:
    """The file of a pipeline given by path (relative to ``relative_to``,
    else the working directory) or by name."""
    given = Path(name_or_path)
    path = (relative_to / given) if relative_to and not given.is_absolute() else given
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"no pipeline file {path}")
        return path
    for d in directories():
        if (d / f"{name_or_path}.yaml").is_file():
            return d / f"{name_or_path}.yaml"
    raise FileNotFoundError(
        f"no pipeline named {str(name_or_path)!r} (named: {', '.join(names())})"
    )


def find(device_kind: str, workload_kinds: list[str]) -> str:
    """The named pipeline for a device kind (``cpu`` or ``gpu``) and a
    workload (its name and its segments' scheduler kinds): among those whose
    ``match`` accepts both, the most specific (most keys), then by name.
    Pipelines without ``match`` are picked by name only."""
    ranked = []
    for name in names():
        doc = load(locate(name))
        match = doc.get("match") if isinstance(doc, Located) else None
        if not isinstance(match, Located):
            continue
        devices, kinds = match.get("device"), match.get("workload")
        if devices is not None and device_kind not in devices:
            continue
        if kinds is not None and not set(kinds) & set(workload_kinds):
            continue
        ranked.append((-len(match), name))
    if not ranked:
        raise FileNotFoundError(
            f"no pipeline matches device {device_kind} and workload {workload_kinds}"
        )
    return min(ranked)[1]


# --- loading --------------------------------------------------------------------------
def load_pipeline(
    name_or_path: str | os.PathLike[str], variables: Mapping[str, Any] | None = None
) -> Pipeline:
    """Loads and checks a pipeline file (or a named pipeline).
    ``variables`` gives its variables values; strings (as a command line
    gives them) are read as the declared type, and relative paths are
    relative to the working directory."""
    path = locate(name_or_path)
    given = {k: _from_caller(v) for k, v in (variables or {}).items()}
    doc, values = _substituted(path, given, Path.cwd(), f"variables given to {path}")
    stages = _stages(path, doc, (path.resolve(),))
    _check_reads(stages)
    match = {k: list(v) for k, v in doc.get("match", {}).items()}
    workload = doc.get("workload")
    if workload is not None and "fusion" in workload:
        line = line_of(workload, "fusion")
        _require_file(path, workload["fusion"], line, "workload.fusion", set())
    return Pipeline(
        path.stem, path, str(doc.get("description", "")), tuple(stages), values, match, workload
    )


class _Text(str):
    """A value a caller gave as text (a command line), read by type."""


def _from_caller(value: Any) -> Any:
    return _Text(value) if isinstance(value, str) else value


def _substituted(
    path: Path, given: dict[str, Any], base: Path, giver: str
) -> tuple[Located, dict[str, Any]]:
    """The file's document checked against the schema with its variables
    substituted, and the variables' values."""
    doc = load(path)
    if not isinstance(doc, Located):
        raise YamlError(path, None, "", "a pipeline file is a mapping (version, stages, ...)")
    if doc.get("version") != 1:
        raise YamlError(path, line_of(doc, "version"), "version", "must be 1")
    declared = doc.get("variables", Located())
    head = Located(doc.line, {"variables": doc.lines.get("variables", doc.line)})
    head["variables"] = declared  # with its line, for errors in the declarations
    _validate(path, head, variables_only=True)
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise YamlError(
            path,
            None,
            "variables",
            f"{giver}: no variable {unknown[0]!r} (declared: {', '.join(declared) or 'none'})",
        )
    values = {name: _value(path, name, decl, given, base, giver) for name, decl in declared.items()}
    body = Located(doc.line, dict(doc.lines))
    body.update((k, v) for k, v in doc.items() if k != "variables")
    substituted = _substitute(path, body, values, "", doc.line)
    _validate(path, substituted)
    return substituted, values


def _value(
    path: Path, name: str, decl: Located, given: dict[str, Any], base: Path, giver: str
) -> Any:
    """The variable's value: the one ``giver`` gave (read relative to
    ``base``), else its default; errors in a given value say who gave it."""
    key = f"variables.{name}"
    if name in given:
        value, where, by = given[name], base, f" (given by {giver})"
    elif "default" in decl:
        value, where, by = decl["default"], path.parent, ""
    else:
        raise YamlError(
            path, line_of(decl, "type"), key, f"required (type {decl['type']}) and not given"
        )
    kind = decl["type"]
    if isinstance(value, _Text) and kind != "str" and kind != "path":
        value = yaml.safe_load(value) if value else value
    if not isinstance(value, _TYPES[kind]) or (kind != "bool" and isinstance(value, bool)):
        raise YamlError(path, line_of(decl, "type"), key, f"expects {kind}, got {value!r}{by}")
    if kind == "path":
        value = str(where / str(value))
    elif kind in ("str", "float"):
        value = {"str": str, "float": float}[kind](value)
    choices = decl.get("choices")
    if choices is not None and value not in choices:
        message = f"{value!r} is not one of {choices}{by}"
        raise YamlError(path, line_of(decl, "choices"), key, message)
    return value


def _substitute(path: Path, value: Any, values: dict[str, Any], key: str, line: int) -> Any:
    """``value`` (at ``line``) with every ``${name}`` replaced, lines kept."""
    if isinstance(value, Located):
        out = Located(value.line, dict(value.lines))
        for k, v in value.items():
            where = f"{key}.{k}" if key else k
            out[k] = _substitute(path, v, values, where, line_of(value, k) or line)
        return out
    if isinstance(value, LocatedList):
        items = LocatedList(value.line, list(value.lines))
        items.extend(
            _substitute(path, v, values, f"{key}[{i}]", line_of(value, i) or line)
            for i, v in enumerate(value)
        )
        return items
    if not isinstance(value, str) or "$" not in value:
        return value

    def lookup(m: re.Match[str]) -> Any:
        if m.group(1) == "$":
            return "$"
        name = m.group(2)
        if name is None:
            raise YamlError(path, line, key, f"write ${{{m.group(1)}}} for a variable")
        if name not in values:
            raise YamlError(
                path,
                line,
                key,
                f"unresolved variable ${{{name}}} (declared: {', '.join(values) or 'none'})",
            )
        return values[name]

    whole = _VARIABLE.fullmatch(value)
    if whole and whole.group(2) is not None:
        return lookup(whole)
    return _VARIABLE.sub(lambda m: _text(lookup(m)), value)


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _stages(path: Path, doc: Located, chain: tuple[Path, ...]) -> list[Stage]:
    """The file's stages, includes spliced in."""
    items: LocatedList = doc["stages"]
    out: list[Stage] = []
    for i, item in enumerate(items):
        line = line_of(items, i) or items.line
        kind, options = (item, None) if isinstance(item, str) else next(iter(item.items()))
        if kind == "include":
            out.extend(_include(path, options, line, f"stages[{i}].include", chain))
        else:
            out.append(Stage(kind, options, path, line, f"stages[{i}]"))
    return out


def _include(path: Path, options: Any, line: int, key: str, chain: tuple[Path, ...]) -> list[Stage]:
    target_name, given = (
        (options, {}) if isinstance(options, str) else (options["pipeline"], options.get("with"))
    )
    try:
        target = locate(target_name, relative_to=path.parent)
    except OSError as e:  # not found, a name too long for the file system, ...
        raise YamlError(path, line, key, str(e)) from e
    if target.resolve() in chain:
        cycle = " -> ".join(p.name for p in (*chain, target.resolve()))
        raise YamlError(path, line, key, f"includes itself: {cycle}")
    doc, _ = _substituted(target, dict(given or {}), path.parent, f"{path}:{line}: {key}.with")
    return _stages(target, doc, (*chain, target.resolve()))


# --- checks ---------------------------------------------------------------------------
@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


def _validate(path: Path, doc: Mapping[str, Any], variables_only: bool = False) -> None:
    """The first schema error in ``doc``, as a :class:`YamlError` at its
    line; with ``variables_only``, of the variable declarations alone."""
    import jsonschema

    schema = _schema()
    if variables_only:
        schema = {
            "$defs": schema["$defs"],
            "type": "object",
            "properties": {"variables": schema["properties"]["variables"]},
        }
    _check_stage_names(path, doc.get("stages"))
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(_builtin(doc))
    )
    if error is None:
        return
    container: Any = doc
    line, where = line_of(doc, "") or None, []
    for step in error.absolute_path:
        line = line_of(container, step) or line
        where.append(f"[{step}]" if isinstance(step, int) else f".{step}")
        container = container[step]
    if error.validator == "additionalProperties" and isinstance(container, Located):
        # point at the first key the schema does not know
        known = error.schema.get("properties", {})
        extra = next(k for k in container if k not in known)
        line = line_of(container, extra) or line
    key = "".join(where).lstrip(".")
    raise YamlError(path, line, key, error.message)


def _check_stage_names(path: Path, items: Any) -> None:
    """An unknown stage by name: the schema would only say "not valid"."""
    if not isinstance(items, LocatedList):
        return
    for i, item in enumerate(items):
        kinds = [item] if isinstance(item, str) else list(item) if isinstance(item, dict) else []
        for kind in kinds:
            if kind not in (*STAGES, "include"):
                raise YamlError(
                    path,
                    line_of(items, i),
                    f"stages[{i}]",
                    f"unknown stage {kind!r}; stages are {', '.join(STAGES)} (and include)",
                )


def _reads(stage: Stage) -> Iterator[tuple[str, str]]:
    """The files a stage reads: ``(option, path relative to its file)``
    (the schema allows ``file`` on select, ``trace`` on schedule and apply)."""
    options = stage.options if isinstance(stage.options, Mapping) else {}
    for option in ("file", "trace"):
        value = options.get(option)
        for relative in value if isinstance(value, list) else [value] if value else []:
            yield option, relative


def _check_reads(stages: list[Stage]) -> None:
    """Every file read exists or is written by an earlier stage; every
    ``module:function`` imports."""
    written: set[Path] = set()
    for s in stages:
        options = s.options if isinstance(s.options, Located) else Located()
        for option, relative in _reads(s):
            key = f"{s.key}.{s.kind}.{option}"
            _require_file(s.path, relative, line_of(options, option), key, written)
        for option in ("selector", "function"):
            if option in options:
                try:
                    resolve_callable(options[option], s.path.parent)
                except (ImportError, AttributeError) as e:
                    raise s.error(str(e), option) from e
        if "save" in options:
            written.add(s.file(options["save"]).resolve())


def _require_file(
    path: Path, relative: str, line: int | None, key: str, written: set[Path]
) -> None:
    """``relative`` (to ``path``) exists, or an earlier stage writes it."""
    target = (path.parent / relative).resolve()
    if not target.is_file() and target not in written:
        raise YamlError(path, line, key, f"no file {target}")


def resolve_callable(reference: str, base: Path) -> Callable[..., Any]:
    """``module:function`` (dots allowed on both sides), imported with
    ``base`` (the pipeline's directory) searched first."""
    module_name, _, attr = reference.partition(":")
    with _search_first(base):
        try:
            target: Any = importlib.import_module(module_name)
        except ImportError as e:
            raise ImportError(f"cannot import {module_name!r} for {reference}: {e}") from e
    for part in attr.split("."):
        if not hasattr(target, part):
            raise AttributeError(f"{module_name} has no {attr!r} for {reference}")
        target = getattr(target, part)
    if not callable(target):
        raise AttributeError(f"{reference} is not callable")
    return target  # type: ignore[no-any-return]


@contextlib.contextmanager
def _search_first(directory: Path) -> Iterator[None]:
    entry = str(directory.resolve())
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added:
            sys.path.remove(entry)


def _builtin(value: Any) -> Any:
    """Plain dicts and lists (for the schema validator and YAML dumps)."""
    if isinstance(value, Mapping):
        return {k: _builtin(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_builtin(v) for v in value]
    return str(value) if isinstance(value, _Text) else value
