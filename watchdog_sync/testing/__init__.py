"""Test helpers: a fake clock for timing logic (and, later, the FaultGateway)."""

from ._clock import FakeClock

__all__ = ["FakeClock"]
