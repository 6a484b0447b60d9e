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
from typing import Any, Iterator

import pytest

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
