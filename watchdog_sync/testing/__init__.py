"""Test helpers: a fake clock for timing logic, the FaultGateway (a misbehaving LLM server)
and the names of the library's own threads, for leak checks.

Importing this package does not need pytest; the ``fault_gateway`` fixture
lives in the pytest plugin ``watchdog_sync.testing._plugin``, which pytest
loads through the ``pytest11`` entry point.
"""

from .._core.watchdog import THREAD_NAME as WATCHDOG_THREAD_NAME
from .._stream.stream import READER_THREAD_NAME
from ._clock import FakeClock
from ._gateway import FaultGateway, SeenRequest

__all__ = [
    "READER_THREAD_NAME",
    "WATCHDOG_THREAD_NAME",
    "FakeClock",
    "FaultGateway",
    "SeenRequest",
]
