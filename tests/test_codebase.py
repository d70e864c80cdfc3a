"""The size limits CONTRIBUTING.md sets for the Rust sources: no file over
600 lines and no function over 100 lines outside tests, so that every
module and function can be read on a screen or two."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(ROOT.glob("crates/*/src/**/*.rs"))
MAX_FILE_LINES = 600
MAX_FN_LINES = 100

# String and char literals (their braces are not the code's) and comments.
_LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'|//.*')
_FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def _code_lines(text: str) -> list[str]:
    """The lines before the unit tests, with string and char literals and
    comments blanked, line by line (no source spells a brace in a raw
    string or in a string's continuation line)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and lines[i + 1].lstrip().startswith("mod "):
            lines = lines[:i]
            break
    return [_LITERAL.sub('""', line) for line in lines]


def _functions(lines: list[str]) -> list[tuple[str, int, int]]:
    """Each function's name, first line (1-based) and length in lines."""
    found = []
    for i, line in enumerate(lines):
        if not (m := _FN.match(line)):
            continue
        depth, opened = 0, False
        for j in range(i, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            opened = opened or "{" in lines[j]
            if (opened and depth <= 0) or (not opened and lines[j].rstrip().endswith(";")):
                break
        found.append((m.group(1), i + 1, j - i + 1))
    return found


def test_the_function_finder_measures_functions() -> None:
    code = 'fn a() {\n    let s = "}";\n    if x { y }\n}\nfn b();\npub(crate) fn c() {}\n'
    assert _functions(_code_lines(code)) == [("a", 1, 4), ("b", 5, 1), ("c", 6, 1)]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_source_files_and_functions_fit_the_limits(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_FILE_LINES, f"{path.name}: split the module"
    long = [(name, at, n) for name, at, n in _functions(_code_lines(text)) if n > MAX_FN_LINES]
    assert long == [], f"functions over {MAX_FN_LINES} lines (name, line, length): {long}"
