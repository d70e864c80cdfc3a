"""What CONTRIBUTING.md asks of the sources' shape: no file over 600 lines
(Rust and the Python package) and no Rust function over 100 lines
outside tests, so that every module and function can be read on a screen
or two; module dependencies that point one way (no import circles between
a crate's modules, nor between the Python package's, function-local
imports included); and no citation of a dated log entry."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
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


_USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(crate|super|self)::([^;]+);", re.M)


def _module(src: Path, path: Path) -> tuple[str, ...]:
    parts = path.relative_to(src).with_suffix("").parts
    return parts[:-1] if parts[-1] in ("lib", "mod") else parts


def _targets(tree: str) -> list[list[str]]:
    """The module paths a `use` tree names (`a::{b::C, d}` gives a::b::C
    and a::d)."""
    head, brace, rest = tree.partition("{")
    prefix = [p for p in head.strip().split("::") if p]
    if not brace:
        return [prefix]
    inner, depth, items, item = rest.rsplit("}", 1)[0], 0, [], ""
    for ch in inner:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items, item = [*items, item], ""
        else:
            item += ch
    return [prefix + t for i in [*items, item] if i.strip() for t in _targets(i)]


def _imports(crate: Path) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """Each module's imports of other modules of its crate, ancestors and
    descendants left out (a module declares its children and may use
    what its parent re-exports)."""
    src = crate / "src"
    modules = {_module(src, p): p for p in src.rglob("*.rs")}
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in modules}
    for m, path in modules.items():
        text = path.read_text().split("#[cfg(test)]")[0]
        for root, tree in _USE.findall(text):
            base = {"crate": (), "super": m[:-1], "self": m}[root]
            for target in _targets(tree):
                full = base + tuple(target)
                named = next((full[:k] for k in range(len(full), 0, -1) if full[:k] in modules), ())
                related = named[: len(m)] == m or m[: len(named)] == named
                if not related:
                    graph[m].add(named)
    return graph


def _cycle(graph: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[str] | None:
    state: dict[tuple[str, ...], int] = {}

    def visit(m: tuple[str, ...], path: list[tuple[str, ...]]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return ["::".join(x) for x in [*path[path.index(n) :], n]]
            if n not in state and (found := visit(n, [*path, n])):
                return found
        state[m] = 2
        return None

    return next((c for m in sorted(graph) if m not in state and (c := visit(m, [m]))), None)


def test_the_import_graph_finds_a_circle() -> None:
    a, b, c = ("a",), ("b",), ("c",)
    assert _cycle({a: {b}, b: {c}, c: set()}) is None
    assert _cycle({a: {b}, b: {c}, c: {a}}) == ["a", "b", "c", "a"]
    assert _targets("a::{b::C, d}") == [["a", "b", "C"], ["a", "d"]]


CRATES = sorted(src.parent for src in ROOT.glob("crates/*/src"))


@pytest.mark.parametrize("crate", CRATES, ids=lambda p: p.name)
def test_modules_import_one_way(crate: Path) -> None:
    assert _cycle(_imports(crate)) is None, "modules import each other in a circle"


# "the fifty-fifth session", "sixtieth entry": a citation of a dated log
# entry, which no reader can follow once the log is gone. A measurement
# names the benchmark script and case that shows it instead.
_ORDINAL = re.compile(
    r"\b(?:[a-z]+-)?(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
    r"|eleventh|twelfth|[a-z]+teenth|[a-z]+tieth)\s+(?:session|entry)\b",
    re.IGNORECASE,
)
_TEXT = {".rs", ".py", ".pyi", ".md", ".toml", ".yaml", ".yml", ".sh", ".wgsl", ".json"}


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / f for f in listed if Path(f).suffix in _TEXT and (ROOT / f).is_file()]


def test_the_citation_finder_finds_ordinal_citations() -> None:
    assert _ORDINAL.search("(BENCHMARKS.md, fifty-fifth session)")
    assert _ORDINAL.search("the Sixtieth entry")
    assert not _ORDINAL.search('@pytest.fixture(scope="session")')


def test_nothing_cites_log_entries_by_ordinal() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _tracked_text_files()
        if path != Path(__file__)  # its examples of what it finds
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if _ORDINAL.search(line)
    ]
    assert found == [], "cite the benchmark script and case instead"


PACKAGE = ROOT / "python" / "tilefuse"
PY_SOURCES = sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("path", PY_SOURCES, ids=lambda p: p.name)
def test_python_modules_fit_the_limit(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_FILE_LINES, f"{path.name}: split the module"


def _python_imports(source: str, modules: set[str]) -> set[str]:
    """The package's modules that ``source`` imports when it runs, at the
    top or inside a function; imports for type checking only are left
    out (they never run)."""
    tree = ast.parse(source)
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
        elif node.level == 1:
            found |= {alias.name for alias in node.names}
        elif node.module and node.module.startswith("tilefuse."):
            found.add(node.module.split(".")[1])
    return found & modules


def test_the_python_import_finder_sees_function_local_imports() -> None:
    source = (
        "from . import a\nif TYPE_CHECKING:\n    from .b import B\ndef f():\n    from .c import C\n"
    )
    assert _python_imports(source, {"a", "b", "c"}) == {"a", "c"}


def test_python_modules_import_one_way() -> None:
    modules = {p.stem for p in PY_SOURCES} - {"__init__"}
    graph = {
        (m,): {(d,) for d in _python_imports((PACKAGE / f"{m}.py").read_text(), modules - {m})}
        for m in modules
    }
    assert _cycle(graph) is None, "modules import each other in a circle"


_ALLOWS_UNSAFE = re.compile(r"^\s*#!?\[allow\(unsafe_code\)\]", re.M)


def test_the_files_allowed_unsafe_are_the_ones_contributing_lists() -> None:
    listed = re.findall(
        r"^\| `(tilefuse-[\w-]+/src/[\w/]+\.rs)` \| \S",
        (ROOT / "CONTRIBUTING.md").read_text(),
        re.M,
    )
    allowing = {
        str(p.relative_to(ROOT / "crates"))
        for p in ROOT.glob("crates/*/src/**/*.rs")
        if _ALLOWS_UNSAFE.search(p.read_text())
    }
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert allowing - set(listed) == set(), "allowed unsafe but not listed with a reason"
    assert set(listed) - allowing == set(), "listed but no longer allows unsafe"


def test_the_benchmark_report_is_rendered_from_the_results() -> None:
    """BENCHMARKS.md is what `benches/report.py` makes of
    `benches/results/`: regenerated, never edited by hand."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "report.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("page", "limit"), [("README.md", 200), ("BENCHMARKS.md", 300)])
def test_the_front_pages_can_be_taken_in(page: str, limit: int) -> None:
    assert len((ROOT / page).read_text().splitlines()) < limit, f"{page}: move details to docs/"
