"""The package's layers: every module imports, no lower part imports a higher one, no cycle.

Read from the source (the AST of each file), so an import inside a function counts as
much as one at the top; only imports under ``if TYPE_CHECKING:`` are left out.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
from typing import Dict, Iterator, List, Optional, Set

import pytest

import watchdog_sync

pytestmark = pytest.mark.timeout(30)

PACKAGE = "watchdog_sync"
ROOT = pathlib.Path(watchdog_sync.__file__).parent
# core < retry < http < stream < httpx < chat, sample, propagate < testing, telemetry, ray < cli;
# the door re-exports them all (but telemetry, which imports OpenTelemetry, and ray, whose public
# face watchdog_sync.ray is imported by nothing; it runs run_sample and reuses propagate's
# wall-clock deadline, so it sits above both). The transport is
# three parts: http (requests/urllib3), stream (the stream engine, stream_sse over Session),
# httpx (its transport and client over both, and instrument(), which patches urllib3 and httpx).
RANKS = {
    "core": 0,
    "retry": 1,
    "http": 2,
    "stream": 3,
    "httpx": 4,
    "chat": 5,
    "sample": 5,
    "propagate": 5,
    "testing": 6,
    "telemetry": 6,
    "ray": 6,
    "cli": 7,
}
DOOR = 8


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: Dict[str, pathlib.Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _part(module: str) -> str:
    """``watchdog_sync._core.errors`` -> ``core``; the package itself is the door."""
    pieces = module.split(".")
    if len(pieces) == 1:
        return "door"
    name = pieces[1].lstrip("_")
    if name == "version":
        return "core"  # a leaf
    if name in ("wsgi", "celery"):
        return "propagate"  # its public faces
    if name == "otel":
        return "telemetry"  # its public face
    return name


def _rank(module: str) -> int:
    return DOOR if _part(module) == "door" else RANKS[_part(module)]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, skipping the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from (n for stmt in child.orelse for n in [stmt, *_nodes(stmt)])
            continue
        yield child
        yield from _nodes(child)


def _resolve(module: str, node: ast.ImportFrom) -> List[str]:
    """The modules ``from ... import ...`` names: submodules where they are, else the module."""
    target = node.module or ""
    if node.level:
        package = module.split(".")
        if MODULES[module].name != "__init__.py":
            package.pop()
        base = package[: len(package) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    return [
        f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target
        for alias in node.names
    ]


def imports_of(module: str) -> Set[str]:
    """The package's modules that ``module`` imports (any depth, not TYPE_CHECKING)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: Set[str] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, node))
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def _cycle() -> Optional[List[str]]:
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for target in sorted(GRAPH[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_of_the_package_imports(module: str) -> None:
    """Each module imports (the graph below covers every file, so each must be real)."""
    assert importlib.import_module(module).__name__ == module


def test_the_import_graph_sees_the_imports() -> None:
    """The walker is not vacuous: known edges, a lazy one and a TYPE_CHECKING one."""
    assert "watchdog_sync._core.errors" in GRAPH["watchdog_sync._retry.classify"]
    assert "watchdog_sync._cli.demo" in GRAPH["watchdog_sync._cli.main"]  # inside a function
    assert "watchdog_sync._core.budget" not in GRAPH["watchdog_sync._core.errors"]  # typing only
    assert len(GRAPH) == len(MODULES) > 40
    assert "watchdog_sync._propagate.celery" in GRAPH["watchdog_sync.celery"]


def test_no_lower_part_imports_a_higher_one() -> None:
    """core < retry < http < stream < httpx < chat, sample, propagate (apart) < testing < cli."""
    wrong = [
        f"{module} ({_part(module)}) imports {target} ({_part(target)})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if _part(target) != _part(module) and _rank(target) >= _rank(module)
    ]
    assert wrong == []


def test_there_is_no_import_cycle() -> None:
    """Not even through an import inside a function (the status table's old cycle)."""
    assert _cycle() is None
