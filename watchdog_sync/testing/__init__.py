"""Test helpers: a fake clock for timing logic and the FaultGateway, a misbehaving LLM server.

Importing this package does not need pytest; the ``fault_gateway`` fixture
lives in the pytest plugin ``watchdog_sync.testing._plugin``, which pytest
loads through the ``pytest11`` entry point.
"""

from ._clock import FakeClock
from ._gateway import FaultGateway, SeenRequest

__all__ = ["FakeClock", "FaultGateway", "SeenRequest"]
