"""YAML files whose errors name the file, the line and the key: the loader
keeps the line of every mapping key, and :class:`YamlError` carries them.
PyYAML parses; this only remembers where things were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["Located", "LocatedList", "YamlError", "line_of", "load"]


class YamlError(ValueError):
    """A YAML file that is not what it should be: ``path:line: key: what``."""

    def __init__(self, path: Path | str, line: int | None, key: str, message: str) -> None:
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")
        self.path, self.line, self.key = str(path), line, key


class Located(dict[str, Any]):
    """A mapping that knows the (1-based) line of each of its keys."""

    def __init__(self, line: int = 0, lines: dict[str, int] | None = None) -> None:
        super().__init__()
        self.line = line
        self.lines: dict[str, int] = lines or {}


class LocatedList(list[Any]):
    """A sequence that knows the (1-based) line of each of its items."""

    def __init__(self, line: int = 0, lines: list[int] | None = None) -> None:
        super().__init__()
        self.line = line
        self.lines: list[int] = lines or []


def line_of(container: Any, key: str | int) -> int | None:
    """The line of ``container[key]`` (of a mapping's key, a sequence's
    item), else of the container itself, where known."""
    if isinstance(container, Located):
        return container.lines.get(str(key), container.line) or None
    if isinstance(container, LocatedList):
        inside = isinstance(key, int) and 0 <= key < len(container.lines)
        return (container.lines[key] if inside else container.line) or None  # type: ignore[index]
    return None


def load(path: Path) -> Any:
    """The file's single document, mappings as :class:`Located` and
    sequences as :class:`LocatedList`."""
    try:
        node = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise YamlError(path, mark.line + 1 if mark else None, "", str(e).splitlines()[0]) from e
    return None if node is None else _plain(node)


def _plain(node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = Located(node.start_mark.line + 1)
        for key, value in node.value:
            # keys as written: a variable named `on` stays "on", not True
            name = key.value if isinstance(key, yaml.ScalarNode) else str(_plain(key))
            out[name] = _plain(value)
            out.lines[name] = key.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        items = LocatedList(node.start_mark.line + 1)
        for value in node.value:
            items.append(_plain(value))
            items.lines.append(value.start_mark.line + 1)
        return items
    return _SCALARS.construct_object(node)


# Constructs scalars (ints, floats, bools, null, strings) with YAML's safe
# rules; the stream is never read.
_SCALARS = yaml.SafeLoader("")
