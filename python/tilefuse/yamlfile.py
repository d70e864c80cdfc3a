"""YAML files whose errors name the file, the line and the key: the loader
keeps the line of every mapping key, and :class:`YamlError` carries them.
PyYAML parses; this only remembers where things were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["Located", "YamlError", "load"]


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


def load(path: Path) -> Any:
    """The file's single document, mappings as :class:`Located`."""
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
            name = str(_plain(key))
            out[name] = _plain(value)
            out.lines[name] = key.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(v) for v in node.value]
    return _SCALARS.construct_object(node)


# Constructs scalars (ints, floats, bools, null, strings) with YAML's safe
# rules; the stream is never read.
_SCALARS = yaml.SafeLoader("")
