"""The Celery app of the worker tests and of ``benchmarks/celery_fanout.py``.

The broker and result backend are the Redis at ``WATCHDOG_SYNC_TEST_REDIS_URL``; tasks go
to the queue ``WATCHDOG_SYNC_TEST_CELERY_QUEUE`` (one per test run, so runs sharing a Redis
never see each other's messages). ``WATCHDOG_SYNC_TEST_CELERY_INSTALL=0`` leaves
``watchdog_sync.celery.install`` out, to measure what happens without it. The worker
(``celery -A integration.celery_app worker``) and the test process import this same module.
"""

from __future__ import annotations

import os
import time
from typing import Any, List, Optional

from celery import Celery

import watchdog_sync
from watchdog_sync.celery import install

URL = os.environ.get("WATCHDOG_SYNC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("WATCHDOG_SYNC_TEST_CELERY_QUEUE", "watchdog-sync-tests")
INSTALLED = os.environ.get("WATCHDOG_SYNC_TEST_CELERY_INSTALL", "1") == "1"
MARGIN = 0.5
RETRY_ATTEMPTS_CAP = 1000  # the retry loop below is bounded by count too

app = Celery("watchdog_sync_tests", broker=URL, backend=URL, set_as_current=False)
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    result_expires=600,
    task_time_limit=30,  # no test task lives longer than this, whatever happens
)
undo = install(app, margin=MARGIN) if INSTALLED else None


@app.task(name="wdsync.add")
def add(a: int, b: int) -> int:
    """Finishes at once."""
    return a + b


@app.task(name="wdsync.budget_seen")
def budget_seen() -> Optional[float]:
    """Seconds left of the scope the body runs in (None when unbounded)."""
    left = watchdog_sync.current_budget().remaining()
    return None if left == float("inf") else left


@app.task(name="wdsync.retry_once", bind=True)
def retry_once(self: Any) -> Optional[float]:
    """Retries itself once after 1 s, then returns the seconds left of its scope."""
    if self.request.retries == 0:
        raise self.retry(countdown=1.0, max_retries=1)
    return budget_seen()


@app.task(name="wdsync.hold")
def hold(seconds: float) -> float:
    """Keeps a worker slot busy for ``seconds`` (a plain sleep: no library wait)."""
    time.sleep(seconds)
    return seconds


@app.task(name="wdsync.fetch")
def fetch(url: str, timeout: Optional[float] = None) -> int:
    """One GET through watchdog_sync.Session: bounded by the scope the worker runs it in
    (and by its own ``timeout``, a fresh full one per hop, as legacy code passes it)."""
    with watchdog_sync.Session() as session:
        return int(session.get(url, timeout=timeout).status_code)


@app.task(name="wdsync.fetch_retrying")
def fetch_retrying(url: str) -> List[str]:
    """The incident: a GET retried in ``except Exception`` until it works (or 1000 tries)."""
    errors: List[str] = []
    for _ in range(RETRY_ATTEMPTS_CAP):
        try:
            with watchdog_sync.Session() as session:
                session.get(url)
            return errors
        except Exception as exc:  # the legacy code under test swallows everything
            errors.append(type(exc).__name__)
    return errors


@app.task(name="wdsync.mark")
def mark(path: str) -> str:
    """Writes ``path``: proof that the body ran."""
    with open(path, "w", encoding="utf-8") as out:
        out.write("ran")
    return path
