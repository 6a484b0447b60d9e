"""What a forked child keeps of its parent's state: nothing of ours (DESIGN, Core rules).

After ``fork()`` the child is a copy of its parent with one thread, the one that forked. A
copy of the watchdog's heap would run the parent's timers in the child, and the parent's
callbacks shut the parent's sockets: a socket the child inherited is the same socket, so a
shutdown there ends the parent's connection too (a pooled one, in use again by then). So
the child starts with no budget, no registered socket, no watchdog entry and no thread of
the parent's.

One ``os.register_at_fork`` hook for the package runs in the child what the modules that
own per-process state declared when they were loaded: :func:`process_local` for a
``ContextVar`` (the forking thread's value goes back to the variable's default) and
:func:`on_fork_in_child` for anything else (the watchdog's heap, each thread's private
session). :func:`generation` tells an object made before the fork (a socket registry, say)
that it is the parent's now.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any, Callable, List, Tuple, TypeVar

__all__ = ["generation", "on_fork_in_child", "process_local"]

T = TypeVar("T")

_generation = 0  # forks this process is from, counted from the first one that imported us
_variables: List[Tuple[contextvars.ContextVar[Any], Any]] = []
_resets: List[Callable[[], None]] = []


def generation() -> int:
    """A number that changes in a forked child: an object that kept the one it was made in
    knows, by comparing, whether it was made in this process."""
    return _generation


def process_local(variable: contextvars.ContextVar[T]) -> contextvars.ContextVar[T]:
    """Declare ``variable`` (which must have a default) the parent's only: in a forked
    child, the forking thread's context holds its default again. Returns ``variable``."""
    default = contextvars.Context().run(variable.get)
    _variables.append((variable, default))
    return variable


def on_fork_in_child(reset: Callable[[], None]) -> None:
    """Run ``reset()`` in every forked child, in the forking thread, before anything else
    of ours; resets run in the order they were declared."""
    _resets.append(reset)


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1
    for variable, default in _variables:
        variable.set(default)
    for reset in _resets:
        reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
