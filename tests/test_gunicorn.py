"""A real gunicorn with one sync worker: the request's scope ends before the worker timeout.

gunicorn's arbiter kills a sync worker that is busy longer than ``--timeout``
(``WORKER TIMEOUT``, SIGABRT then SIGKILL), dropping the request with no
answer. With ``DeadlineMiddleware(max_timeout=timeout - margin)`` a request
blocked on a silent dependency answers 504 first, and the same worker lives on.
"""

from __future__ import annotations

import time

import pytest
import requests

import watchdog_sync as ws
from watchdog_sync.wsgi import DeadlineMiddleware

from . import wsgi_apps
from .rawserver import RawServer, silent
from .wsgiservers import gunicorn_server, wsgiref_server

pytestmark = pytest.mark.timeout(60)

WORKER_TIMEOUT = 3
MAX_TIMEOUT = 2.0


def test_a_sync_worker_answers_504_before_its_timeout_and_survives() -> None:
    """Blocked on a silent server: 504 at max_timeout (2 s), a margin before --timeout 3."""
    env = {"WS_TEST_MAX_TIMEOUT": str(MAX_TIMEOUT)}
    with (
        RawServer(silent) as downstream,
        gunicorn_server(timeout=WORKER_TIMEOUT, env=env) as server,
    ):
        worker = server.worker_pid()
        started = time.monotonic()
        answer = requests.get(
            f"{server.url}/chain", params={"to": f"{downstream.url}/budget"}, timeout=20
        )
        took = time.monotonic() - started
        after = server.worker_pid()
        log = server.log()
    assert answer.status_code == 504
    assert answer.json() == {"reason": "deadline_exceeded", "stage": "request"}
    assert MAX_TIMEOUT - 0.1 < took < WORKER_TIMEOUT - 0.5  # ended by a margin
    assert after == worker  # not killed
    assert "WORKER TIMEOUT" not in log


def test_gunicorn_as_the_second_hop_adopts_what_the_first_left() -> None:
    """Caller 3 s -> wsgiref A spends 0.5 s -> gunicorn B sees about 2.5 s, never more."""
    with (
        gunicorn_server(timeout=30) as second,
        wsgiref_server(DeadlineMiddleware(wsgi_apps.app)) as first,
    ):
        answer = requests.get(
            f"{first}/chain",
            params={"to": f"{second.url}/budget", "spend": "0.5"},
            headers=ws.deadline_headers(ws.Budget(3.0)),
            timeout=10,
        )
    assert answer.status_code == 200, answer.text
    downstream = answer.json()["downstream"]
    header = ws.budget_from_headers({"grpc-timeout": downstream["grpc_timeout"]})
    assert header is not None and header.deadline is not None
    assert 3.0 - 0.5 - 0.6 < header.deadline - header.started <= 3.0 - 0.5
    assert downstream["left"] <= header.deadline - header.started
