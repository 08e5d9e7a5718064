"""The house rules of docs/architecture.md, checked on the source tree.

- No import circles between files: not in ``python/daisy`` (type-checking
  imports and imports inside functions count too), not between the
  modules of ``daisy-core`` or ``daisy-py``.
- ``daisy-py`` only converts: it keeps no accounting, decides no outcome
  and writes no file.
- ``python/daisy`` computes no statistic the core reports (no refitted
  trend, no utilisation of its own).

These read the repository's sources, so they are skipped where the tests run
against an installed wheel without a checkout beside them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / "python" / "daisy"
CORE = ROOT / "daisy-core" / "src"
BINDINGS = ROOT / "daisy-py" / "src"

pytestmark = pytest.mark.skipif(not CORE.is_dir(), reason="no source checkout beside the tests")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as the list of its nodes), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_find_cycle_finds_cycles_and_only_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


# -- Python ---------------------------------------------------------------


def python_modules() -> dict[str, Path]:
    out = {}
    for path in PY.rglob("*.py"):
        parts = list(path.relative_to(PY.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def absolute_module(importer: str, path: Path, module: str | None, level: int) -> str:
    """The module ``from <level dots><module> import ...`` names, in the
    module ``importer`` (its file at ``path``): relative imports resolved
    against the importer's package, as Python resolves them."""
    if level == 0:
        return module or ""
    package = importer.split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - (level - 1)]
    return ".".join(package + ([module] if module else []))


def test_relative_imports_resolve_as_python_resolves_them() -> None:
    here = PY / "tcp" / "tcp_stream.py"
    assert absolute_module("daisy.tcp.tcp_stream", here, "exceptions", 1) == "daisy.tcp.exceptions"
    assert absolute_module("daisy.tcp.tcp_stream", here, None, 1) == "daisy.tcp"
    assert absolute_module("daisy.tcp.tcp_stream", here, "block", 2) == "daisy.block"
    init = PY / "tcp" / "__init__.py"
    assert absolute_module("daisy.tcp", init, "tcp_server", 1) == "daisy.tcp.tcp_server"


def python_import_graph() -> dict[str, set[str]]:
    """Module -> modules it imports, anywhere in the file. Package
    ``__init__`` files are re-export hubs (they import every module) and
    are left out; ``from daisy import x`` is an edge to the module
    ``daisy.x`` when there is one."""
    modules = python_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if path.name == "__init__.py":
            continue
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = absolute_module(name, path, node.module, node.level)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and modules[t].name != "__init__.py":
                    edges.add(t)
                    break
        graph[name] = edges
    return graph


def test_python_modules_import_each_other_without_circles() -> None:
    graph = python_import_graph()
    assert "daisy.task" in graph and "daisy.report.task_report" in graph["daisy.task"]
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph) or [])}"


def test_python_computes_no_statistic_the_core_reports() -> None:
    for path in PY.rglob("*.py"):
        text = path.read_text()
        assert "polyfit" not in text, f"{path.name} refits a trend the core reports"
        assert "def utilisation" not in text, f"{path.name} computes utilisation itself"


# -- Rust -----------------------------------------------------------------


def rust_modules(src: Path) -> dict[str, Path]:
    out = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        out["::".join(parts)] = path
    return out


def strip_rust(text: str) -> str:
    """The code of a Rust file before its unit tests, without comments."""
    text = text.split("#[cfg(test)]")[0]
    return re.sub(r"//[^\n]*", "", text)


def rust_import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> modules of the same crate its code names (``crate::``,
    ``super::`` and ``self::`` paths). The crate root is left out: it
    declares every module."""
    modules = rust_modules(src)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name == "":
            continue
        here = name.split("::")
        parent, own = here[:-1], here
        edges: set[str] = set()
        for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", strip_rust(path.read_text())):
            base = {"crate": [], "super": parent, "self": own}[m.group(1)]
            parts = base + m.group(2).strip(":").split("::")
            while parts and "::".join(parts) not in modules:
                parts = parts[:-1]
            target = "::".join(parts)
            if parts and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


@pytest.mark.parametrize("src", [CORE, BINDINGS], ids=["daisy-core", "daisy-py"])
def test_rust_modules_use_each_other_without_circles(src: Path) -> None:
    graph = rust_import_graph(src)
    assert len(graph) > 8
    assert find_cycle(graph) is None, f"use circle: {' -> '.join(find_cycle(graph) or [])}"


def test_the_server_splits_into_decisions_and_actions() -> None:
    graph = rust_import_graph(CORE)
    assert graph["server::policy"] <= {"block", "error", "worker_timeline"}, (
        "policy decides on data alone"
    )
    assert "server::policy" not in graph["server::supervision"]
    assert "server::state" not in graph["server::supervision"]


def test_the_bindings_only_convert() -> None:
    forbidden = {
        "file writing": r"std::fs|OpenOptions|File::create|\.write_all\(",
        "accounting": r"Welford|BlockAggregates|RunLedger|record_success|\.push\(\s*round_trip",
        "the outcome rule": r"Outcome::of|\"completed\"|\"interrupted\"",
        "the profiler's measurement": r"BlockProfiler::stop\b|\.stop\(\)",
        "a value rule": r"must be (at least|at most|positive|a positive)|is_zero\(\)",
        "a task's started rule": r"started\s*\[|started:\s*&|started:\s*Vec",
        "which errors stop a run": r"is_instance_of::<PyException>",
    }
    # the one place that tells the core what kind of error user code raised
    allowed = {"which errors stop a run": {"errors.rs"}}
    for path in BINDINGS.rglob("*.rs"):
        code = strip_rust(path.read_text())
        for what, pattern in forbidden.items():
            if path.name in allowed.get(what, set()):
                continue
            assert not re.search(pattern, code), f"{path.name} does {what} ({pattern})"


def test_the_task_holds_no_value_rule() -> None:
    """``Task.__init__`` coerces types, warns and words messages; every
    rule on a value (counts, timeouts, resources, GPU options, geometry) is
    the core's (``daisy._daisy.TaskOptions``, ``TaskSpec``)."""
    code = (PY / "task.py").read_text()
    for pattern in (
        r"must be (at least|at most|positive|a positive)",
        r"isfinite|MAX_TIMEOUT|MAX_COUNT",
        r"asks for GPU figures",
        r"[<>]=?\s*0\b",
    ):
        assert not re.search(pattern, code), f"task.py holds a value rule ({pattern})"
