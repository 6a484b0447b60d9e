"""watchdog_sync.celery.install without a worker: the signals, the headers, the window logic.

The skip of a task whose caller's deadline passed while the message waited inside a worker
(Celery's own expiry check came too early to see it) cannot be timed with a real worker, so
it runs through ``Task.apply`` here, which drives the same tracer a worker uses.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest
from celery import Celery, group, signals
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult, ResultSet

import watchdog_sync
from watchdog_sync import DeadlineExceeded, deadline
from watchdog_sync.celery import install

from .internals import HEADER_DEADLINE, HEADER_TIMEOUT, task_window, time_left

pytestmark = pytest.mark.timeout(30)


class _App:
    def __init__(self) -> None:
        self.app = Celery(
            "unit", broker="memory://", backend="cache+memory://", set_as_current=False
        )
        self.ran: List[str] = []
        self.name = f"unit.seen.{uuid.uuid4().hex}"  # Celery keeps one callable per task name

        @self.app.task(name=self.name)
        def seen(tag: str) -> Optional[float]:
            self.ran.append(tag)
            left = watchdog_sync.current_budget().remaining()
            return None if math.isinf(left) else left

        self.seen = seen


@pytest.fixture
def unit() -> Iterator[_App]:
    made = _App()
    yield made
    made.app.close()


def test_importing_watchdog_sync_or_its_celery_module_does_not_import_celery() -> None:
    code = (
        "import sys, watchdog_sync, watchdog_sync.celery; "
        "assert 'celery' not in sys.modules, 'celery was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)


def test_install_is_idempotent_and_its_undo_disconnects_everything(unit: _App) -> None:
    before = len(signals.before_task_publish.receivers), len(signals.worker_init.receivers)
    undo = install(unit.app)
    assert install(unit.app) is undo
    assert len(signals.before_task_publish.receivers) == before[0] + 1
    unit.app.finalize()
    assert "run" in vars(unit.app.tasks[unit.name])
    undo()
    undo()
    assert (
        len(signals.before_task_publish.receivers),
        len(signals.worker_init.receivers),
    ) == before
    assert "run" not in vars(unit.app.tasks[unit.name])
    assert install(unit.app) is not undo  # installable again after the undo
    install(unit.app)()


def test_install_on_a_finalized_app_wraps_its_tasks_at_once(unit: _App) -> None:
    unit.app.finalize()
    undo = install(unit.app)
    try:
        assert "run" in vars(unit.app.tasks[unit.name])
    finally:
        undo()


@pytest.mark.parametrize("margin", [-1, float("nan"), "0.5"])
def test_a_bad_margin_is_refused_with_its_name(unit: _App, margin: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="margin"):
        install(unit.app, margin=margin)


def test_installing_again_with_another_margin_says_to_undo_first(unit: _App) -> None:
    undo = install(unit.app, margin=0.5)
    try:
        with pytest.raises(ValueError, match="undo"):
            install(unit.app, margin=1.0)
    finally:
        undo()


def _publish(headers: dict) -> dict:
    signals.before_task_publish.send(sender="unit", body=((), {}, {}), headers=headers)
    return headers


def test_a_task_sent_inside_a_scope_carries_its_deadline_and_expires(unit: _App) -> None:
    undo = install(unit.app)
    try:
        with deadline(5):
            headers = _publish({"id": "a", "expires": None})
        outside = _publish({"id": "b", "expires": None})
    finally:
        undo()
    assert 4.5 < headers[HEADER_DEADLINE] - time.time() <= 5.0
    assert 4.5 < headers[HEADER_TIMEOUT] <= 5.0
    expires = datetime.datetime.fromisoformat(headers["expires"]).timestamp()
    assert expires == pytest.approx(headers[HEADER_DEADLINE], abs=1e-3)
    assert outside == {"id": "b", "expires": None}


def test_an_earlier_expires_of_the_caller_is_kept_and_a_later_one_replaced(unit: _App) -> None:
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    late = soon + datetime.timedelta(hours=1)
    undo = install(unit.app)
    try:
        with deadline(60):
            kept = _publish({"id": "a", "expires": soon.isoformat()})
            replaced = _publish({"id": "b", "expires": late.isoformat()})
    finally:
        undo()
    assert kept["expires"] == soon.isoformat()
    replaced_at = datetime.datetime.fromisoformat(replaced["expires"]).timestamp()
    assert replaced_at == pytest.approx(time.time() + 60, abs=1.0)


def _apply(unit: _App, headers: dict) -> Any:
    undo = install(unit.app)
    unit.app.finalize()  # as every worker does before it takes a task: this wraps the tasks
    try:
        return unit.seen.apply(("t",), headers=headers)
    finally:
        undo()


def test_a_task_whose_callers_deadline_passed_is_not_started(unit: _App) -> None:
    """The body never runs; the task fails with DeadlineExceeded naming the queue time."""
    result = _apply(unit, {HEADER_DEADLINE: time.time() - 1.0, HEADER_TIMEOUT: 5.0})
    assert isinstance(result.result, DeadlineExceeded)
    assert "not started" in str(result.result)
    assert unit.ran == []


def test_a_worker_clock_behind_the_sender_cannot_stretch_the_budget(unit: _App) -> None:
    """A deadline an hour ahead on the worker's clock: still only what the caller had left."""
    result = _apply(unit, {HEADER_DEADLINE: time.time() + 3600, HEADER_TIMEOUT: 1.0})
    assert 0.5 < result.get() <= 1.0


@pytest.mark.parametrize("bad", ["soon", float("nan"), True, "1e999", [1]])
def test_a_malformed_deadline_header_is_ignored_with_a_log_line(
    unit: _App, bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="watchdog_sync"):
        result = _apply(unit, {HEADER_DEADLINE: bad})
    assert result.get() is None  # unbounded: nothing taken from the header
    assert unit.ran == ["t"]
    assert any(HEADER_DEADLINE in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("header", [HEADER_DEADLINE, HEADER_TIMEOUT])
@pytest.mark.parametrize(
    "bad",
    [10**400, -(10**400), float("inf"), "-inf", "1e400"],
    ids=["10**400", "-10**400", "inf", "text -inf", "text 1e400"],
)
def test_a_deadline_header_past_the_range_of_a_float_is_ignored_not_an_overflow_error(
    unit: _App, header: str, bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21: ``10**400`` failed the task with OverflowError; now it runs as with no header."""
    with caplog.at_level(logging.WARNING, logger="watchdog_sync"):
        result = _apply(unit, {header: bad})
    assert result.get() is None  # unbounded: nothing taken from the header
    assert unit.ran == ["t"]
    logged = [record.getMessage() for record in caplog.records if header in record.getMessage()]
    assert logged and all(len(line) < 200 for line in logged), logged


def test_after_undo_the_task_runs_unwrapped(unit: _App) -> None:
    install(unit.app)
    unit.app.finalize()
    install(unit.app)()
    result = unit.seen.apply(("t",), headers={HEADER_DEADLINE: time.time() - 1.0})
    assert result.get() is None
    assert unit.ran == ["t"]


@pytest.mark.parametrize(
    ("caller", "soft", "hard", "margin", "seconds", "why"),
    [
        (None, None, None, 0.5, None, None),
        (None, 1.5, None, 0.5, 1.0, "soft_time_limit"),
        (None, None, 4.0, 0.5, 3.5, "time_limit"),
        (None, 0.6, None, 0.5, 0.3, "soft_time_limit"),  # never less than half the limit
        (0.8, 10.0, 20.0, 0.5, 0.8, "caller's deadline"),
        (5.0, 1.5, 20.0, 0.5, 1.0, "soft_time_limit"),
        (-0.25, 1.5, None, 0.5, -0.25, "passed 0.25s ago"),
    ],
)
def test_the_window_is_the_earliest_of_the_callers_deadline_and_the_limits_less_the_margin(
    caller: Optional[float],
    soft: Optional[float],
    hard: Optional[float],
    margin: float,
    seconds: Optional[float],
    why: Optional[str],
) -> None:
    window = task_window(caller, soft=soft, hard=hard, margin=margin)
    if seconds is None:
        assert window is None
        return
    assert window is not None
    assert window[0] == pytest.approx(seconds)
    assert why is not None and why in window[1]


def test_time_left_trusts_the_wall_clock_deadline_but_never_more_than_was_left_at_sending() -> None:
    assert time_left(100.0, 5.0, 98.0) == 2.0  # queue time counts
    assert time_left(100.0, 5.0, 50.0) == 5.0  # a receiver clock behind: capped
    assert time_left(100.0, None, 101.0) == -1.0  # passed
    assert time_left(None, None, 0.0) is None


# -- waiting for a result inside a scope (issue 21); the real worker: integration/ ----------


def _raised(wait: Callable[[], Any]) -> Tuple[BaseException, float]:
    """What ``wait()`` raised (the test fails if nothing) and after how many seconds."""
    started = time.monotonic()
    with pytest.raises(BaseException) as caught:
        wait()
    return caught.value, time.monotonic() - started


@pytest.fixture
def waiting(unit: _App) -> Iterator[_App]:
    """An installed app whose memory broker no worker reads: its results never arrive."""
    undo = install(unit.app)
    yield unit
    undo()


def test_get_inside_a_scope_ends_at_the_deadline_with_deadline_exceeded(waiting: _App) -> None:
    """Before: Celery's TimeoutError after the full timeout=3."""
    result = waiting.seen.delay("t")

    def wait() -> None:
        with deadline(0.3):
            result.get(timeout=3)

    error, ended = _raised(wait)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert error.phase == "wait"
    assert 0.28 <= ended < 0.8


def test_an_explicit_smaller_timeout_wins_with_celerys_timeout_error(waiting: _App) -> None:
    result = waiting.seen.delay("t")

    def wait() -> None:
        with deadline(5):
            result.get(timeout=0.3)

    error, ended = _raised(wait)
    assert type(error) is CeleryTimeoutError, repr(error)
    assert 0.28 <= ended < 0.8


@pytest.mark.parametrize("how", ["outside a scope", "after undo", "another app's result"])
def test_where_it_does_not_apply_the_wait_is_celerys_own(waiting: _App, how: str) -> None:
    """Celery's own TimeoutError after the full timeout=0.4, not the 0.1 s scope's end."""
    result = waiting.seen.delay("t")
    if how == "after undo":
        install(waiting.app)()
    elif how == "another app's result":
        other = _App().app  # never installed; its memory backend holds no result
        result = AsyncResult(result.id, app=other)
    scope = contextlib.nullcontext() if how == "outside a scope" else deadline(0.1)

    def wait() -> None:
        with scope:
            result.get(timeout=0.4)

    try:
        error, ended = _raised(wait)
    finally:
        if how == "another app's result":
            other.close()
    assert type(error) is CeleryTimeoutError, repr(error)
    assert ended >= 0.39


@pytest.mark.parametrize("how", ["ResultSet.get", "join", "join_native", "GroupResult.get"])
def test_waiting_for_a_set_of_results_inside_a_scope_ends_at_the_deadline(
    waiting: _App, how: str
) -> None:
    if how == "GroupResult.get":
        results: Any = group(waiting.seen.s(str(i)) for i in range(3)).apply_async()
    else:
        results = ResultSet([waiting.seen.delay(str(i)) for i in range(3)])
    method = {"join": "join", "join_native": "join_native"}.get(how, "get")

    def wait() -> None:
        with deadline(0.2):
            getattr(results, method)(timeout=3)

    error, ended = _raised(wait)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert error.phase == "wait"
    assert 0.18 <= ended < 0.7


def test_cancel_stops_the_wait_with_operation_cancelled(waiting: _App) -> None:
    result = waiting.seen.delay("t")

    def wait() -> None:
        with deadline(1.2) as budget:
            # The cancel comes from the one watchdog thread, 0.1 s in (no timer thread).
            unregister = watchdog_sync.Budget(0.1).on_done(lambda _: budget.cancel())
            try:
                result.get(timeout=3)
            finally:
                unregister()

    error, ended = _raised(wait)
    assert isinstance(error, watchdog_sync.OperationCancelled), repr(error)
    assert ended < 0.8


def test_a_result_already_stored_comes_back_at_once_inside_a_scope(waiting: _App) -> None:
    waiting.app.backend.store_result("done-1", 42, "SUCCESS")
    with deadline(1):
        assert AsyncResult("done-1", app=waiting.app).get() == 42


def test_a_result_of_a_task_that_ignores_results_is_none_at_once_inside_a_scope(
    waiting: _App,
) -> None:
    """As Celery has it: nothing to wait for (not a wait until the deadline)."""
    result = waiting.seen.delay("t")
    result.ignored = True
    started = time.monotonic()
    with deadline(2):
        assert result.get() is None
    assert time.monotonic() - started < 0.5


def test_the_deprecated_wait_alias_is_bounded_too(waiting: _App) -> None:
    result = waiting.seen.delay("t")

    def wait() -> None:
        with deadline(0.2):
            result.wait(timeout=3)

    error, ended = _raised(wait)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert ended < 0.7
