"""watchdog_sync.celery on a real Redis broker with a real prefork worker process.

The worker (``celery -A integration.celery_app worker``, 2 processes) and a redis-server on a free
port of 127.0.0.1 are started once for the module (``WATCHDOG_SYNC_TEST_REDIS_URL`` names a
Redis to use instead) and reaped at its end. The dependency the tasks call is a raw socket
server in this process that accepts and never answers.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import socket
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Iterator, List

import pytest
from celery.result import ResultSet

from tests.rawserver import RawServer, wait_for_disconnect
from watchdog_sync import DeadlineExceeded, deadline

from .celeryprocs import RedisServer, Worker

pytestmark = pytest.mark.timeout(120)

_RESULT_SECONDS = 15.0  # how long a test waits for a task's outcome: far above every bound


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    wait_for_disconnect(conn, stop)  # accepts, reads the request, never answers


class Running:
    """The running set-up: the app module (tasks, ``app``) and its worker."""

    def __init__(self, module: Any, worker: Worker) -> None:
        self.module = module
        self.worker = worker


@pytest.fixture(scope="module")
def celery() -> Iterator[Running]:
    """integration.celery_app on a Redis of its own (or the one named), with one worker running."""
    if "integration.celery_app" in sys.modules:
        raise RuntimeError("integration.celery_app was imported before its broker was chosen")
    given = os.environ.get("WATCHDOG_SYNC_TEST_REDIS_URL")
    with tempfile.TemporaryDirectory(prefix="wdsync-celery-") as root:
        redis = None if given else RedisServer(pathlib.Path(root))
        env = {
            "WATCHDOG_SYNC_TEST_REDIS_URL": given if redis is None else redis.url,
            "WATCHDOG_SYNC_TEST_CELERY_QUEUE": f"wdsync-tests-{uuid.uuid4().hex[:8]}",
            "WATCHDOG_SYNC_TEST_CELERY_INSTALL": "1",
        }
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        module = importlib.import_module("integration.celery_app")
        worker = None
        try:
            worker = Worker(
                module.app, dict(os.environ), pathlib.Path(root) / "worker.log",
                queues=[module.QUEUE],
            )  # fmt: skip
            assert module.add.delay(1, 1).get(timeout=_RESULT_SECONDS) == 2  # pools warmed up
            yield Running(module, worker)
        finally:
            if worker is not None:
                worker.stop()
            module.app.close()
            if module.undo is not None:
                module.undo()
            sys.modules.pop("integration.celery_app", None)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            if redis is not None:
                redis.stop()


def _outcome(result: Any) -> BaseException:
    """The exception the caller's ``AsyncResult.get()`` raises (the test fails if none)."""
    with pytest.raises(Exception) as caught:
        result.get(timeout=_RESULT_SECONDS)
    return caught.value


def test_a_task_sent_inside_a_deadline_fails_with_deadline_exceeded_about_then(
    celery: Running,
) -> None:
    """Queue time included: both worker slots are busy for 1 s, the 2 s deadline still holds."""
    tasks = celery.module
    with RawServer(_silent) as silent:
        holds = [tasks.hold.delay(1.0) for _ in range(2)]
        with deadline(2):
            sent = time.monotonic()
            result = tasks.fetch.delay(silent.url)
        error = _outcome(result)
        ended = time.monotonic() - sent
        assert [hold.get(timeout=_RESULT_SECONDS) for hold in holds] == [1.0, 1.0]
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert error.reason == "deadline_exceeded"
    left_at_start = re.search(r"caller's deadline \((\d+\.\d+)s left at start\)", str(error))
    assert left_at_start is not None, str(error)
    assert float(left_at_start.group(1)) <= 1.1  # the 1 s in the queue was spent from the 2 s
    assert 1.9 <= ended < 2.9, f"ended {ended:.2f}s after sending, its deadline was 2 s"


def test_a_task_retrying_in_except_exception_ends_at_its_soft_limit_less_the_margin(
    celery: Running,
) -> None:
    """soft_time_limit 1.5 s, margin 0.5 s: the scope ends at 1 s, not at the 6 s hard limit."""
    tasks = celery.module
    with RawServer(_silent) as silent:
        sent = time.monotonic()
        result = tasks.fetch_retrying.apply_async((silent.url,), soft_time_limit=1.5, time_limit=6)
        error = _outcome(result)
        ended = time.monotonic() - sent
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert "soft_time_limit of 1.5s" in str(error)
    assert 0.9 <= ended < 2.5, f"ended {ended:.2f}s after sending"


def test_a_task_that_finishes_in_time_is_untouched(celery: Running) -> None:
    """Its value comes back; inside, it saw the caller's budget less the time in transit."""
    tasks = celery.module
    with deadline(5):
        total = tasks.add.delay(2, 3)
        seen = tasks.budget_seen.delay()
    assert total.get(timeout=_RESULT_SECONDS) == 5
    left = seen.get(timeout=_RESULT_SECONDS)
    assert 3.5 < left <= 5.0


def test_outside_a_scope_a_task_runs_until_its_time_limit_less_the_margin(celery: Running) -> None:
    """No caller deadline: the body's scope is the app's task_time_limit (30 s) less 0.5 s."""
    left = celery.module.budget_seen.delay().get(timeout=_RESULT_SECONDS)
    assert 28.5 < left <= 29.5


def test_a_task_whose_caller_gave_up_before_a_worker_took_it_is_not_started(
    celery: Running, tmp_path: pathlib.Path
) -> None:
    """Sent to a queue no worker reads until the caller's 0.3 s are over: revoked, body not run."""
    from celery.exceptions import TaskRevokedError

    tasks = celery.module
    queue = f"{tasks.QUEUE}-later"
    proof = tmp_path / "ran"
    over = threading.Event()
    with deadline(0.3) as budget:
        result = tasks.mark.apply_async((str(proof),), queue=queue)
        budget.on_done(lambda _: over.set())
    assert over.wait(5)
    celery.worker.consume(queue)
    error = _outcome(result)
    assert isinstance(error, TaskRevokedError), repr(error)
    assert result.state == "REVOKED"
    assert not proof.exists()


def test_a_retry_keeps_its_callers_deadline_not_the_soft_limit_window_of_its_first_run(
    celery: Running,
) -> None:
    """First run's window is 0.7 s, the retry comes 1 s later: it runs (the caller had 5 s)."""
    with deadline(5):
        result = celery.module.retry_once.apply_async(soft_time_limit=1.2)
    left = result.get(timeout=_RESULT_SECONDS)
    assert 0.5 < left <= 0.7  # the retried run's own window, inside the caller's remaining ~4 s


# -- waiting for a result inside a scope (issue 21) ---------------------------------------


def _ended_with(wait: Any) -> tuple[BaseException, float]:
    """Run ``wait()`` (which must raise) and return what it raised and when."""
    started = time.monotonic()
    with pytest.raises(BaseException) as caught:
        wait()
    return caught.value, time.monotonic() - started


def _revoked(celery: Running) -> set[str]:
    """The task ids the worker holds as revoked."""
    replies = celery.module.app.control.inspect(
        destination=[celery.worker.name], timeout=2.0
    ).revoked()
    return {task_id for ids in (replies or {}).values() for task_id in ids}


def test_get_inside_a_deadline_waits_the_time_left_then_raises_deadline_exceeded(
    celery: Running,
) -> None:
    """A task the worker runs for 3 s, sent before the scope: get() ends at the 1 s deadline."""
    running = celery.module.hold.delay(3.0)
    try:

        def wait() -> None:
            with deadline(1.0):
                running.get()

        error, ended = _ended_with(wait)
    finally:
        assert running.get(timeout=_RESULT_SECONDS) == 3.0  # the worker ran it to its end
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert 0.95 <= ended < 1.3, f"get() ended {ended:.2f}s into a 1 s deadline"


def test_an_explicit_smaller_timeout_still_wins_with_celerys_own_timeout_error(
    celery: Running,
) -> None:
    from celery.exceptions import TimeoutError as CeleryTimeoutError

    waiting = celery.module.add.apply_async((1, 2), queue=f"{celery.module.QUEUE}-idle")

    def wait() -> None:
        with deadline(5.0):
            waiting.get(timeout=0.5)

    error, ended = _ended_with(wait)
    assert type(error) is CeleryTimeoutError, repr(error)
    assert 0.45 <= ended < 0.9, f"get(timeout=0.5) ended after {ended:.2f}s"


@pytest.mark.parametrize(
    "how", ["ResultSet.get", "ResultSet.join", "ResultSet.join_native", "GroupResult.get"]
)
def test_waiting_for_a_set_of_results_inside_a_deadline_ends_at_it(
    celery: Running, how: str
) -> None:
    """Tasks on a queue no worker reads, sent outside the scope: each wait ends at 0.6 s."""
    from celery import group

    tasks = celery.module
    queue = f"{tasks.QUEUE}-idle"
    if how == "GroupResult.get":
        results: Any = group(tasks.add.s(i, i) for i in range(3)).apply_async(queue=queue)
    else:
        results = ResultSet([tasks.add.apply_async((i, i), queue=queue) for i in range(3)])
    method = {"ResultSet.join": "join", "ResultSet.join_native": "join_native"}.get(how, "get")

    def wait() -> None:
        with deadline(0.6):
            getattr(results, method)(timeout=_RESULT_SECONDS)

    error, ended = _ended_with(wait)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert 0.55 <= ended < 0.9, f"{how} ended {ended:.2f}s into a 0.6 s deadline"


def test_results_that_arrive_in_time_come_back_through_every_wait(celery: Running) -> None:
    from celery import group

    tasks = celery.module
    with deadline(10.0):
        assert tasks.add.delay(2, 3).get() == 5
        assert ResultSet([tasks.add.delay(1, 1), tasks.add.delay(2, 2)]).get() == [2, 4]
        assert ResultSet([tasks.add.delay(3, 3)]).join() == [6]
        assert group(tasks.add.s(i, 1) for i in range(3)).apply_async().get() == [1, 2, 3]


def test_a_task_sent_with_the_deadline_that_ran_out_is_revoked_others_are_not(
    celery: Running,
) -> None:
    """Sent inside the scope whose end stopped get(): revoked; sent outside it or in an outer
    scope with time left: left alone (someone may still wait for them)."""
    tasks = celery.module
    queue = f"{tasks.QUEUE}-idle"
    outside = tasks.add.apply_async((1, 1), queue=queue)
    with deadline(30.0):
        outer = tasks.add.apply_async((2, 2), queue=queue)
        for result in (outside, outer):
            with pytest.raises(DeadlineExceeded), deadline(0.3):
                result.get()
        with pytest.raises(DeadlineExceeded), deadline(0.3):
            inner = tasks.add.apply_async((3, 3), queue=queue)
            inner.get()
    revoked = _revoked(celery)
    assert inner.id in revoked
    assert outside.id not in revoked and outer.id not in revoked


def test_join_native_gives_its_callback_each_result_once_across_its_rounds(
    celery: Running,
) -> None:
    """The wait runs in one-second rounds: a result delivered in the first is not repeated.

    Both results are stored by hand (the tasks sit on a queue no worker reads): Celery's own
    join_native() returns ``None`` at once for a pending member when another member was
    fetched with get() before the set was made (seen on Celery 5.7, without watchdog_sync).
    """
    tasks = celery.module
    queue = f"{tasks.QUEUE}-idle"
    done = tasks.add.apply_async((1, 1), queue=queue)
    tasks.app.backend.store_result(done.id, 2, "SUCCESS")
    later = tasks.add.apply_async((2, 2), queue=queue)
    seen: List[Any] = []
    store = threading.Timer(1.4, tasks.app.backend.store_result, (later.id, 4, "SUCCESS"))
    with deadline(5.0):
        store.start()
        try:
            ResultSet([done, later]).join_native(callback=lambda *pair: seen.append(pair))
        finally:
            store.join(5)
    assert seen == [(done.id, 2), (later.id, 4)]
