"""run_sample: every outcome is reported, with a reason that agrees with the error's class,
even for exceptions whose ``__str__`` or ``.response`` raise.

Sample functions live at module level so process mode can pickle them.
"""

from __future__ import annotations

import os
from typing import Any, List, Literal

import pytest

from watchdog_sync import (
    DeadlineExceeded,
    OperationCancelled,
    OperationTimeout,
    classify,
    current_budget,
    deadline,
    run_sample,
)

pytestmark = pytest.mark.timeout(60)

Isolate = Literal["thread", "process"]
MODES: List[Isolate] = ["thread", "process"]


class HostileError(Exception):
    """An exception whose text and whose ``.response`` both raise when read."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this error is hostile")

    @property
    def response(self) -> Any:
        raise RuntimeError("reading .response is hostile")


def raise_hostile() -> None:
    raise HostileError("boom")


def raise_hostile_after_the_deadline() -> None:
    """Waits in the library until the deadline, then raises the hostile error instead."""
    try:
        current_budget().sleep(30)
    finally:
        raise HostileError("late")  # replacing the stop signal is the attack


def wait_for_the_deadline() -> None:
    current_budget().sleep(30)


def inner_deadline_expires() -> None:
    with deadline(0.05, stage="inner"):
        current_budget().sleep(5)


def cancel_own_budget() -> None:
    current_budget().cancel("gave up")
    current_budget().check()


@pytest.fixture(scope="module", autouse=True)
def _fork_server() -> None:
    """Start multiprocessing's fork server up front (process-wide, like the watchdog thread)."""
    assert run_sample(os.getpid, timeout=30, isolate="process").ok


@pytest.mark.parametrize("isolate", MODES)
def test_an_error_whose_str_and_response_raise_is_still_reported(isolate: Isolate) -> None:
    result = run_sample(raise_hostile, timeout=10, isolate=isolate)
    assert (result.ok, result.reason) == (False, "unknown")
    assert isinstance(result.error, HostileError)
    assert result.error.args == ("boom",)
    assert result.elapsed < 5


def test_a_hostile_error_raised_after_the_deadline_is_kept_on_the_timeout() -> None:
    """Thread mode: the late error becomes the DeadlineExceeded's last_error, text replaced."""
    result = run_sample(raise_hostile_after_the_deadline, timeout=0.2)
    assert result.reason == "deadline_exceeded"
    error = result.error
    assert isinstance(error, DeadlineExceeded)
    assert error.last_error is not None and isinstance(error.last_error, HostileError)
    assert "HostileError: <str() of this HostileError raised RuntimeError>" in str(error)


@pytest.mark.parametrize("isolate", MODES)
@pytest.mark.parametrize(
    ("sample", "timeout", "reason", "kind"),
    [
        (wait_for_the_deadline, 0.2, "deadline_exceeded", DeadlineExceeded),
        (inner_deadline_expires, 10, "operation_timeout", OperationTimeout),
        (cancel_own_budget, 10, "cancelled", OperationCancelled),
    ],
    ids=["run_sample-timeout", "fn-own-deadline", "fn-cancelled"],
)
def test_the_reason_is_the_reason_of_the_error_class(
    isolate: Isolate, sample: Any, timeout: float, reason: str, kind: type
) -> None:
    """One meaning per reason: 'operation_timeout' is an OperationTimeout, and so on."""
    result = run_sample(sample, timeout=timeout, isolate=isolate)
    assert result.reason == reason
    assert type(result.error) is kind
    assert result.error is not None and classify(result.error).reason == reason
    assert getattr(result.error, "reason", None) == reason
