"""Heuristic params as Python classes.

Every class here is built from the JSON Schema that the Rust structs export,
so a field added in Rust appears here with no Python change. Values live in
one plain dict per top-level object; nested attributes are views into it,
so ``p.tile_sizes.cta_tile.m = 64`` changes ``p``. Every write is validated
by the Rust side against the whole object, and a rejected write leaves the
object unchanged.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any, ClassVar, cast

from . import _native

__all__ = [
    "CircularBufferOptions",
    "CompileParams",
    "GemmTile",
    "HeuristicParams",
    "LaunchParams",
    "MatMulTileOptions",
    "MatmulParams",
    "ParamsStruct",
    "PointwiseParams",
    "ReductionParams",
    "SupportedVecSize",
]


class _Root:
    """The dict behind a top-level params object and all its views."""

    __slots__ = ("data", "struct")

    def __init__(self, struct: str, data: dict[str, Any]) -> None:
        self.struct = struct
        self.data = data


def _nested_struct(schema: dict[str, Any], field: dict[str, Any]) -> str | None:
    """The struct name a field refers to, or None for leaf values (enums too)."""
    ref = field.get("$ref", "")
    name = ref.removeprefix("#/$defs/")
    definition = schema.get("$defs", {}).get(name, {})
    return name if ref and "properties" in definition else None


class ParamsStruct:
    """Base of every params class: dict / JSON round trips, attribute access
    at any depth, validation with field paths, equality, hashing, copying
    and pickling."""

    __slots__ = ("_path", "_root")
    _struct: ClassVar[str] = ""
    _schema: ClassVar[dict[str, Any]] = {}
    _fields: ClassVar[dict[str, str | None]] = {}

    def __init_subclass__(cls, struct: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if struct:
            cls._struct = struct
            cls._schema = _native.params_schema(struct)
            props = cls._schema["properties"]
            cls._fields = {k: _nested_struct(cls._schema, v) for k, v in props.items()}
            summary = cls.__doc__ or cls._schema.get("description", "")
            cls.__doc__ = f"{summary}\n\nFields (also ``help()`` on each):\n\n" + "\n".join(
                f"- {_field_line(cls._schema, name, field)}" for name, field in props.items()
            )
            for name, field in props.items():
                # Properties only document the fields for help(); reads and
                # writes go through __getattr__ / __setattr__.
                doc = _field_line(cls._schema, name, field)
                setattr(cls, name, property(_field_getter(name), doc=doc))

    def __init__(self, values: dict[str, Any] | None = None, /, **fields: Any) -> None:
        data = _merge(_plain(values or {}), _plain(fields))
        normalized = _native.params_normalize(self._struct, data)
        _init_view(self, _Root(self._struct, normalized), ())

    # --- construction and export ------------------------------------------
    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ParamsStruct:
        """Builds the object from a (possibly partial) nested dict."""
        return cls(values)

    @classmethod
    def from_json(cls, text: str) -> ParamsStruct:
        """Parses JSON text written by ``to_json`` (or by hand)."""
        return _from_root(cls, _native.params_from_json(cls._struct, text))

    def to_dict(self) -> dict[str, Any]:
        """A complete, independent nested dict of plain values."""
        return copy.deepcopy(self._data())

    def to_json(self, *, indent: int | None = None) -> str:
        """The params as JSON (:meth:`from_json` reads it back): one line,
        or indented by ``indent`` spaces, as :func:`json.dumps` takes it."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of this struct: types, ranges, defaults, docs."""
        return copy.deepcopy(cls._schema)

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(cls._fields)

    def copy(self) -> ParamsStruct:
        """An independent copy (a copied view becomes a standalone object)."""
        return _from_root(type(self), self.to_dict())

    def replace(self, **fields: Any) -> ParamsStruct:
        """A copy with ``fields`` changed (nested structs as partial dicts),
        validated once: for fields that constrain each other, which setting
        one at a time would refuse in between (a workgroup size and the
        reduction's invocations in it, say)."""
        return type(self)(self.to_dict(), **fields)

    # --- attribute access -------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        fields = type(self)._fields
        if name not in fields:
            raise AttributeError(
                f"{type(self).__name__} has no field {name!r}; fields: {', '.join(fields)}"
            )
        nested = fields[name]
        if nested is not None:
            view = object.__new__(_CLASSES[nested])
            _init_view(view, self._root, (*self._path, name))
            return view
        value = self._data()[name]
        return tuple(value) if isinstance(value, list) else value

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ParamsStruct.__slots__:
            object.__setattr__(self, name, value)
            return
        root = self._root
        data = copy.deepcopy(root.data)
        target = data
        for key in self._path:
            target = target[key]
        target[name] = _plain(value)
        try:
            root.data = _native.params_normalize(root.struct, data)
        except _native.ParamsError as e:
            hint = "to change fields that depend on each other together, use replace()"
            e.args = (f"{e} ({hint})",)
            raise

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *type(self)._fields})

    # --- value semantics --------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        assert isinstance(other, ParamsStruct)
        return self._data() == other._data()

    def __hash__(self) -> int:
        return hash((type(self).__name__, json.dumps(self._data(), sort_keys=True)))

    def diff(self, other: ParamsStruct) -> dict[str, tuple[Any, Any]]:
        """The fields whose values differ in ``other``, by dotted path:
        ``{"tile_sizes.cta_tile.m": (this value, other's), ...}``. What a
        tuner changed: ``default.diff(best)``."""
        if type(self) is not type(other):
            raise TypeError(
                f"diff: {type(self).__name__} and {type(other).__name__} have different fields"
            )
        return dict(_differences(self._data(), other._data(), ""))

    def __repr__(self) -> str:
        parts = [f"{k}={getattr(self, k)!r}" for k in type(self)._fields]
        return f"{type(self).__name__}({', '.join(parts)})"

    def __copy__(self) -> ParamsStruct:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> ParamsStruct:
        return self.copy()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_root, (type(self), self.to_dict()))

    def _data(self) -> dict[str, Any]:
        data: dict[str, Any] = self._root.data
        for key in self._path:
            data = data[key]
        return data


class HeuristicParams(ParamsStruct):
    """Base of the scheduler params. ``HeuristicParams.from_dict(d)`` returns
    the class named by ``d["scheduler"]``."""

    __slots__ = ()
    scheduler: ClassVar[str] = ""

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ParamsStruct:
        if cls is not HeuristicParams:
            return super().from_dict(values)
        data = _native.params_normalize("HeuristicParams", _plain(values))
        return _from_root(_SCHEDULERS[data["scheduler"]], data)

    @classmethod
    def _from_native(cls, data: dict[str, Any]) -> HeuristicParams:
        """Wraps a complete dict the native side made (a cache entry's, a
        heuristic's) as it is: no copy, no second validation. On the path
        of every ``Fusion.heuristics`` call."""
        return cast("HeuristicParams", _from_root(_SCHEDULERS[data["scheduler"]], data))

    @classmethod
    def from_json(cls, text: str) -> ParamsStruct:
        if cls is not HeuristicParams:
            return super().from_json(text)
        data = _native.params_from_json("HeuristicParams", text)
        return _from_root(_SCHEDULERS[data["scheduler"]], data)


def _differences(a: dict[str, Any], b: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """``(dotted path, (a's value, b's))`` for each leaf where they differ."""
    for key, mine in a.items():
        theirs, path = b[key], prefix + key
        if isinstance(mine, dict) and isinstance(theirs, dict):
            yield from _differences(mine, theirs, path + ".")
        elif mine != theirs:
            yield path, (mine, theirs)


def _field_type(schema: dict[str, Any], field: dict[str, Any]) -> str:
    """``integer 1..16``, ``one of 'u32', 'u64'``, ``LaunchParams``, ..."""
    if "$ref" in field:
        name = field["$ref"].removeprefix("#/$defs/")
        definition = schema.get("$defs", {}).get(name, {})
        return _field_type(schema, definition) if "properties" not in definition else name
    for key in ("oneOf", "anyOf"):
        if key in field:
            return " or ".join(_field_type(schema, f) for f in field[key])
    if "enum" in field:
        return "one of " + ", ".join(repr(v) for v in field["enum"])
    if "const" in field:
        return repr(field["const"])
    types = field.get("type", "object")
    kind = " or ".join(types) if isinstance(types, list) else str(types)
    if "minimum" in field or "maximum" in field:
        kind += f" {field.get('minimum', '')}..{field.get('maximum', '')}"
    if kind == "array" and "items" in field:
        kind = f"{field.get('minItems', '')} x {_field_type(schema, field['items'])}"
    return kind


def _field_line(schema: dict[str, Any], name: str, field: dict[str, Any]) -> str:
    """One field's documentation: name, type, default and what it does."""
    doc = " ".join(field.get("description", "").split())
    default = f", default {field['default']!r}" if "default" in field else ""
    return f"{name} ({_field_type(schema, field)}{default}): {doc}".rstrip(": ")


def _field_getter(name: str) -> Any:
    def get(self: ParamsStruct) -> Any:
        return ParamsStruct.__getattr__(self, name)

    return get


def _init_view(obj: ParamsStruct, root: _Root, path: tuple[str, ...]) -> None:
    object.__setattr__(obj, "_root", root)
    object.__setattr__(obj, "_path", path)


def _from_root(cls: type[ParamsStruct], data: dict[str, Any]) -> ParamsStruct:
    """Wraps an already complete dict without validating it again."""
    obj = object.__new__(cls)
    _init_view(obj, _Root(cls._struct, data), ())
    return obj


# Params nest a few levels deep; deeper input is a mistake (most often a
# dict or list that contains itself), reported before Python's recursion
# limit is reached.
_MAX_DEPTH = 32


def _plain(value: Any, path: str = "") -> Any:
    """A copy of ``value`` whose containers are new dicts and lists and
    whose params objects are their dicts."""
    if path.count(".") + path.count("[") > _MAX_DEPTH:
        message = f"nested deeper than {_MAX_DEPTH} levels (does a dict or list contain itself?)"
        error = _native.ParamsError(f"{path}: {message}")
        error.path, error.message = path, message
        raise error
    if isinstance(value, ParamsStruct):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


class PointwiseParams(HeuristicParams, struct="PointwiseParams"):
    __slots__ = ()
    scheduler = "pointwise"


class ReductionParams(HeuristicParams, struct="ReductionParams"):
    __slots__ = ()
    scheduler = "reduction"


class MatmulParams(HeuristicParams, struct="MatmulParams"):
    __slots__ = ()
    scheduler = "matmul"


class LaunchParams(ParamsStruct, struct="LaunchParams"):
    __slots__ = ()


class CompileParams(ParamsStruct, struct="CompileParams"):
    __slots__ = ()


class MatMulTileOptions(ParamsStruct, struct="MatMulTileOptions"):
    __slots__ = ()


class GemmTile(ParamsStruct, struct="GemmTile"):
    __slots__ = ()


class CircularBufferOptions(ParamsStruct, struct="CircularBufferOptions"):
    __slots__ = ()


class SupportedVecSize(ParamsStruct, struct="SupportedVecSize"):
    __slots__ = ()


_CLASSES: dict[str, type[ParamsStruct]] = {
    cls._struct: cls
    for cls in (
        PointwiseParams,
        ReductionParams,
        MatmulParams,
        LaunchParams,
        CompileParams,
        MatMulTileOptions,
        GemmTile,
        CircularBufferOptions,
        SupportedVecSize,
    )
}
_SCHEDULERS: dict[str, type[ParamsStruct]] = {
    c.scheduler: c for c in (PointwiseParams, ReductionParams, MatmulParams)
}

_missing = {name for name, _ in _native.params_structs()} - set(_CLASSES)
assert not _missing, f"params structs without a Python class: {_missing}"
