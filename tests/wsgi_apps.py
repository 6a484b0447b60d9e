"""WSGI apps for the propagation tests, served in-process (wsgiref) and by a real gunicorn.

Routes (each answers JSON unless it streams):

* ``/ready``: the worker's pid.
* ``/budget``: what this hop saw: its budget's remaining time at entry, the
  ``grpc-timeout`` header, the pid.
* ``/chain?to=URL&spend=S``: spend ``S`` seconds (budget-aware), then ask
  ``URL`` (a loopback ``/budget`` or a silent server) with
  ``Session(propagate=True)`` and return its answer beside this hop's own view.
* ``/stream?n=N&every=S&wait_first=S``: ``N`` JSON lines, one every ``S``
  seconds (a plain ``time.sleep``: a producer that knows nothing of budgets),
  each naming the remaining time it saw; ``Content-Length`` is declared, so a
  cut is visible to the client. ``wait_first``: a budget-aware wait before
  the first line.

gunicorn builds ``application`` from ``WS_TEST_MAX_TIMEOUT`` and
``WS_TEST_DEFAULT_TIMEOUT``. Loops are bounded; URLs must be on 127.0.0.1.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import watchdog_sync as ws
from watchdog_sync.wsgi import DeadlineMiddleware

StartResponse = Callable[..., Any]
CLOSED: List[str] = []  # streams whose generator was closed, in-process only
_lock = threading.Lock()
_LINE_BYTES = 64


def _left() -> Optional[float]:
    left = ws.current_budget().remaining()
    return None if math.isinf(left) else left


def _json(
    start_response: StartResponse, payload: Dict[str, Any], status: str = "200 OK"
) -> List[bytes]:
    body = json.dumps(payload).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


def _loopback(url: str) -> str:
    if urllib.parse.urlsplit(url).hostname != "127.0.0.1":
        raise ValueError(f"tests talk to 127.0.0.1 only, not {url!r}")
    return url


def _line(index: int, left: Optional[float]) -> bytes:
    return json.dumps({"i": index, "left": left}).encode().ljust(_LINE_BYTES - 1) + b"\n"


def _stream(name: str, n: int, every: float, wait_first: float) -> Iterator[bytes]:
    try:
        if wait_first:
            ws.current_budget().sleep(wait_first)
        for index in range(n):
            yield _line(index, _left())
            time.sleep(every)
    finally:
        with _lock:
            CLOSED.append(name)


def app(environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", "")))
    if path == "/ready":
        return _json(start_response, {"pid": os.getpid()})
    if path == "/budget":
        seen = environ.get("HTTP_GRPC_TIMEOUT")
        return _json(start_response, {"left": _left(), "grpc_timeout": seen, "pid": os.getpid()})
    if path == "/chain":
        entered = _left()
        ws.current_budget().sleep(float(query.get("spend", "0")))
        with ws.Session(propagate=True) as session:
            answer = session.get(_loopback(query["to"]))
            downstream = answer.json()
        return _json(start_response, {"left": entered, "downstream": downstream})
    if path == "/stream":
        n, every = min(int(query["n"]), 1000), float(query["every"])
        wait_first = float(query.get("wait_first", "0"))
        headers = [
            ("Content-Type", "application/x-ndjson"),
            ("Content-Length", str(n * _LINE_BYTES)),
        ]
        start_response("200 OK", headers)
        return _stream(query.get("name", "stream"), n, every, wait_first)
    return _json(start_response, {"error": f"no route {path!r}"}, "404 Not Found")


def _env_seconds(name: str) -> Optional[float]:
    value = os.environ.get(name)
    return float(value) if value else None


application = DeadlineMiddleware(
    app,
    max_timeout=_env_seconds("WS_TEST_MAX_TIMEOUT"),
    default_timeout=_env_seconds("WS_TEST_DEFAULT_TIMEOUT"),
)
