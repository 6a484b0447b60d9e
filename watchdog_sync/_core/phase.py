"""Where work was when its budget ended: a ``Cancelled`` passing through is told the phase.

A wait that knows what it is (a retry's backoff, waiting for a Celery or Ray
task, for a sample's worker) runs inside :func:`in_phase`; the ``Cancelled``
raised there carries the phase to the scope that converts it, and the
resulting ``DeadlineExceeded.phase`` says it. A part below that already said
where it was (a request's ``head``) keeps its word.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from .errors import PHASES, Cancelled

__all__ = ["in_phase", "mark"]


def mark(exc: Cancelled, phase: str, progress: Optional[str] = None) -> None:
    """Tell ``exc`` where the work was, unless a part below already did."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    if exc.phase is None and exc.progress is None:
        exc.phase = phase
        exc.progress = progress


@contextlib.contextmanager
def in_phase(phase: str) -> Iterator[None]:
    """Run the block as ``phase``: a ``Cancelled`` raised inside carries it."""
    try:
        yield
    except Cancelled as exc:
        mark(exc, phase)
        raise
