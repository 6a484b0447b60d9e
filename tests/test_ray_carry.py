"""watchdog_sync.ray without Ray: the lazy import, the deadline a task carries, the checks at the edge.

The carrying is plain functions (``_ray/carry.py``): what ``.remote()`` reads from the
caller's scope, and the scope a worker runs the task in. The cluster tests are in
integration/test_ray.py.
"""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
import time
from typing import Any, Iterator

import pytest

import watchdog_sync as ws
import watchdog_sync.ray as wsray
from tests.internals import carried_now, run_carried, seconds_left

pytestmark = pytest.mark.timeout(30)


def test_importing_watchdog_sync_or_its_ray_module_does_not_import_ray() -> None:
    """Nor does decorating a function or an actor class: Ray is imported at the first send."""
    code = (
        "import sys, watchdog_sync, watchdog_sync.ray as r\n"
        "assert 'ray' not in sys.modules, 'import watchdog_sync.ray imported ray'\n"
        "@r.remote\n"
        "def f(x): return x\n"
        "@r.remote(num_cpus=1)\n"
        "class A:\n"
        "    def m(self): return 1\n"
        "assert 'ray' not in sys.modules, 'decorating imported ray'\n"
        "print('clean')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=25, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


def test_without_ray_the_first_send_says_which_extra_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed

    @wsray.remote
    def task() -> int:
        return 1

    with pytest.raises(ImportError, match=r"pip install 'watchdog-sync\[ray\]'"):
        task.remote()


def test_outside_a_scope_a_task_carries_nothing() -> None:
    assert carried_now() is None
    with ws.deadline(None):
        assert carried_now() is None  # a scope without a limit carries nothing either


def test_inside_a_scope_a_task_carries_the_wall_clock_deadline_and_the_time_left() -> None:
    with ws.deadline(5):
        carried = carried_now(wall_now=1000.0)
    assert carried is not None
    at, left = carried
    assert 4.9 < left <= 5.0
    assert at == pytest.approx(1000.0 + left)


@pytest.mark.parametrize(
    ("end", "error"),
    [("deadline", ws.DeadlineExceeded), ("cancel", ws.OperationCancelled)],
)
def test_sending_from_a_scope_that_has_ended_raises_what_the_scope_converts(
    end: str, error: type
) -> None:
    """Cancelled (not an Exception), converted by the scope that owns the budget."""
    swallowed = []
    with pytest.raises(error), ws.deadline(0 if end == "deadline" else 10) as budget:
        if end == "cancel":
            budget.cancel()
        try:
            carried_now()
        except Exception as exc:  # what legacy code does; it must not catch the stop
            swallowed.append(exc)
    assert swallowed == []


@pytest.mark.parametrize(
    ("carried", "wall_now", "expected"),
    [
        ((1010.0, 10.0), 1000.0, 10.0),  # sent now: the whole time left
        ((1010.0, 10.0), 1004.0, 6.0),  # 4 s queued: spent from the budget
        ((1010.0, 10.0), 990.0, 10.0),  # a worker clock 10 s behind: never more than was left
        ((1010.0, 10.0), 1012.5, -2.5),  # the deadline passed while queued
        (None, 1000.0, None),  # nothing carried: unbounded
    ],
)
def test_the_worker_gets_min_of_the_wall_clock_deadline_and_the_time_left(
    carried: Any, wall_now: float, expected: Any
) -> None:
    assert seconds_left(carried, wall_now) == expected


@pytest.mark.parametrize("carried", ["soon", (1.0,), ("x", "y"), (float("nan"), float("inf"))])
def test_a_malformed_carried_deadline_is_logged_and_read_as_none(
    carried: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="watchdog_sync"):
        assert seconds_left(carried, 1000.0) is None
    assert "malformed" in caplog.text


def test_without_a_carried_deadline_the_task_runs_as_under_plain_ray() -> None:
    def body(a: int, *, b: int) -> Any:
        return (a + b, ws.current_budget().remaining())

    assert run_carried(None, "ray:body", body, (1,), {"b": 2}) == (3, float("inf"))


def test_with_a_carried_deadline_the_task_runs_inside_a_scope_of_the_time_left() -> None:
    def body() -> Any:
        budget = ws.current_budget()
        return budget.remaining(), budget.stage

    left, stage = run_carried((time.time() + 5.0, 5.0), "ray:body", body, (), {})
    assert 4.5 < left <= 5.0 and stage == "ray:body"


def test_a_task_whose_deadline_passed_while_queued_does_not_start() -> None:
    ran = []
    with pytest.raises(ws.DeadlineExceeded, match="not started") as caught:
        run_carried((time.time() - 2.0, 3.0), "ray:body", ran.append, (1,), {})
    assert ran == []
    assert caught.value.stage == "ray:body" and caught.value.reason == "deadline_exceeded"


def test_a_task_that_outlives_its_deadline_raises_deadline_exceeded_that_pickles() -> None:
    """The library's wait inside the task ends at the caller's deadline; the error crosses
    process boundaries with its class and fields (Ray pickles it back to the caller)."""
    swallowed = []

    def body() -> None:
        try:
            ws.current_budget().sleep(5.0)
        except Exception as exc:  # legacy code: cannot swallow the stop
            swallowed.append(exc)

    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded) as caught:
        run_carried((time.time() + 0.1, 0.1), "ray:body", body, (), {})
    assert time.monotonic() - started < 1.0 and swallowed == []
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is ws.DeadlineExceeded
    assert (copy.reason, copy.stage, str(copy)) == (
        "deadline_exceeded",
        "ray:body",
        str(caught.value),
    )


async def _coroutine() -> None:
    return None


def _generator() -> Iterator[int]:
    yield 1


class _AsyncActor:
    async def run(self) -> None:
        return None


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (len, "expects a function"),
        (_coroutine, "is async"),
        (_generator, "is a generator"),
        (_AsyncActor, "is async"),
    ],
)
def test_remote_refuses_what_it_cannot_bound(target: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        wsray.remote(target)


def test_a_remote_function_is_sent_not_called_and_its_arguments_are_checked_first() -> None:
    @wsray.remote(num_cpus=1)
    def task(a: int, b: int = 2) -> int:
        return a + b

    with pytest.raises(TypeError, match=r"cannot be called directly: use task\.remote\(\.\.\.\)"):
        task(1)
    with pytest.raises(TypeError, match=r"task\.remote\(\): missing a required argument: 'a'"):
        task.remote()
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        task.remote(1, c=3)


def _one(item: Any) -> Any:
    return item


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"fn": 3}, TypeError, "fn must be callable"),
        ({"items": 5}, TypeError, "items must be iterable"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": None}, TypeError, "timeout"),
        ({"timeout": float("nan")}, ValueError, "timeout"),
        ({"max_in_flight": 0}, ValueError, "max_in_flight"),
        ({"max_in_flight": True}, ValueError, "max_in_flight"),
        ({"max_in_flight": 1.5}, ValueError, "max_in_flight"),
        ({"max_restarts": 2}, ValueError, "leave max_restarts out"),
    ],
)
def test_run_samples_rejects_bad_arguments_at_the_call(
    kwargs: Any, error: type, message: str
) -> None:
    """Before any sample runs (and before Ray is needed)."""
    call = {"fn": _one, "items": [1], "timeout": 1.0, **kwargs}
    with pytest.raises(error, match=message):
        wsray.run_samples(call.pop("fn"), call.pop("items"), **call)
