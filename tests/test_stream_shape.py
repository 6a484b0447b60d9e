"""The stream half's shape: no process-wide state decides what a stream does, and no class
builds on another module's class.

Read from the source (the AST of each file): in ``_stream`` no ``global`` statement, no
lock made at module level and no fork handler; in the stream half (``_stream``, ``_httpx``,
``_chat/stream.py``) no module over 450 lines, and no class whose base is a class of
another module of the package.
"""

from __future__ import annotations

import ast
import importlib.resources
import pathlib
from typing import Iterator, List, Tuple

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = pathlib.Path(str(importlib.resources.files("watchdog_sync")))
STREAM = sorted((ROOT / "_stream").glob("*.py"))
HALF = [*STREAM, *sorted((ROOT / "_httpx").glob("*.py")), ROOT / "_chat" / "stream.py"]
_LOCKS = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"}


def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _name(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def _calls_named(node: ast.AST) -> Iterator[str]:
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            if isinstance(func, ast.Attribute):
                yield func.attr
            elif isinstance(func, ast.Name):
                yield func.id


def test_no_global_statement_module_lock_or_fork_handler_in_the_stream_part() -> None:
    found: List[Tuple[str, str]] = []
    for path in STREAM:
        tree = _tree(path)
        found += [(_name(path), "global") for n in ast.walk(tree) if isinstance(n, ast.Global)]
        found += [
            (_name(path), "fork handler") for n in _calls_named(tree) if n == "register_at_fork"
        ]
        for statement in tree.body:  # module level only: a lock of each object's own is fine
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                found += [
                    (_name(path), name) for name in _calls_named(statement.value) if name in _LOCKS
                ]
    assert found == []


def test_no_module_of_the_stream_half_is_over_450_lines() -> None:
    sizes = {_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in HALF}
    assert {name: size for name, size in sizes.items() if size > 450} == {}


def test_no_class_of_the_stream_half_subclasses_a_class_of_another_module() -> None:
    """A class holds another module's object; it does not build on its class. The error
    tree is the exception: an error of a part extends ``_core/errors.py``'s classes."""
    found: List[Tuple[str, str]] = []
    for path in HALF:
        tree = _tree(path)
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level > 0 and node.module != "_core.errors"
            for alias in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found += [
                    (_name(path), f"{node.name}({base.id})")
                    for base in node.bases
                    if isinstance(base, ast.Name) and base.id in imported
                ]
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "type"
                and len(node.args) == 3
                and isinstance(node.args[1], ast.Tuple)
            ):
                found += [
                    (_name(path), f"type({base.id})")
                    for base in node.args[1].elts
                    if isinstance(base, ast.Name) and base.id in imported
                ]
    assert found == []
