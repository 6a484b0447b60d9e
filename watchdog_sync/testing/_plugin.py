"""The watchdog_sync pytest plugin: the ``fault_gateway`` fixture.

Registered as a ``pytest11`` entry point, so installing watchdog_sync makes
the fixture available in every test suite.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from ._gateway import FaultGateway

__all__ = ["fault_gateway"]


def _fault_gateway() -> Iterator[FaultGateway]:
    """A started :class:`FaultGateway` on 127.0.0.1, stopped after the test.

    Stopping ends every connection it still holds and joins its threads.
    """
    with FaultGateway() as gateway:
        yield gateway


# Applied without decorator syntax: mypy does not read pytest's sources (they need Python 3.10).
fault_gateway = pytest.fixture(_fault_gateway, name="fault_gateway")
