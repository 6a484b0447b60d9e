"""DeadlineMiddleware on real WSGI servers chained on 127.0.0.1 (wsgiref in threads).

The caller's budget crosses each hop as headers; each hop adopts what is left,
a silent downstream ends in a 504 at the caller's deadline, a streamed body is
bounded, malformed headers are ignored with a log record.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import pathlib
import time
from typing import Any, Dict, Iterator, List, Set

import pytest
import requests

import watchdog_sync as ws
from watchdog_sync.wsgi import DeadlineMiddleware

from . import wsgi_apps
from .rawserver import RawServer, silent
from .wsgiservers import wsgiref_server

pytestmark = pytest.mark.timeout(30)


def middleware(**kwargs: Any) -> DeadlineMiddleware:
    return DeadlineMiddleware(wsgi_apps.app, **kwargs)


def caller_headers(seconds: float) -> Dict[str, str]:
    return ws.deadline_headers(ws.Budget(seconds))


def test_the_second_hop_adopts_the_callers_time_minus_what_the_first_spent() -> None:
    """Caller 3 s -> A spends 0.5 s -> B sees about 2.5 s, never more."""
    with wsgiref_server(middleware()) as second, wsgiref_server(middleware()) as first:
        started = time.monotonic()
        answer = requests.get(
            f"{first}/chain",
            params={"to": f"{second}/budget", "spend": "0.5"},
            headers=caller_headers(3.0),
            timeout=10,
        )
        took = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    header = ws.budget_from_headers({"grpc-timeout": seen["downstream"]["grpc_timeout"]})
    assert header is not None and header.deadline is not None
    first_left, header_left = seen["left"], header.deadline - header.started
    second_left = seen["downstream"]["left"]
    assert 2.7 < first_left <= 3.0  # A: the caller's 3 s, less the trip
    assert 3.0 - 0.5 - 0.6 < header_left <= 3.0 - 0.5  # B's header: what A had left
    assert second_left <= header_left  # B's budget starts from that header
    assert took < 3.0


def test_a_silent_downstream_ends_in_a_504_at_the_callers_deadline() -> None:
    """Caller 1 s -> A calls a server that never answers -> 504 with a JSON reason at ~1 s."""
    with RawServer(silent) as downstream, wsgiref_server(middleware()) as first:
        started = time.monotonic()
        answer = requests.get(
            f"{first}/chain",
            params={"to": f"{downstream.url}/budget"},
            headers=caller_headers(1.0),
            timeout=10,
        )
        took = time.monotonic() - started
    assert answer.status_code == 504
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json() == {"reason": "deadline_exceeded", "stage": "request"}
    assert 0.9 < took < 1.8


def test_a_chain_of_three_ends_at_the_callers_deadline() -> None:
    """Caller 1.5 s -> A -> B -> silent: B answers 504 at its deadline, A passes it on in time."""
    with (
        RawServer(silent) as downstream,
        wsgiref_server(middleware()) as second,
        wsgiref_server(middleware()) as first,
    ):
        inner = f"{second}/chain?to={downstream.url}/budget"
        started = time.monotonic()
        answer = requests.get(
            f"{first}/chain", params={"to": inner}, headers=caller_headers(1.5), timeout=10
        )
        took = time.monotonic() - started
    # B's deadline is A's remaining time counted from when B got the request, so it ends a
    # transit time after A's: A's own deadline usually cuts the call first (A's 504); if
    # B's 504 wins the race, A passes its body on. Either way within the caller's time.
    body = answer.json()
    assert (answer.status_code, body.get("downstream", body)) in (
        (504, {"reason": "deadline_exceeded", "stage": "request"}),
        (200, {"reason": "deadline_exceeded", "stage": "request"}),
    )
    assert 1.3 < took < 2.3


def test_a_streamed_body_is_cut_at_the_deadline_and_its_generator_closed() -> None:
    """200 lines, one per 0.1 s, under 1 s: the connection is closed at ~1 s, short of its
    Content-Length (urllib3 2 raises for that; 1.26 hands over what came)."""
    name = f"cut-{time.monotonic()}"
    received = b""
    with wsgiref_server(middleware()) as first:
        started = time.monotonic()
        with requests.get(
            f"{first}/stream",
            params={"n": "200", "every": "0.1", "name": name},
            headers=caller_headers(1.0),
            stream=True,
            timeout=10,
        ) as answer:
            assert answer.status_code == 200
            declared = int(answer.headers["Content-Length"])
            with contextlib.suppress(requests.exceptions.ChunkedEncodingError):
                for piece in answer.iter_content(64):
                    received += piece
        took = time.monotonic() - started
    lines = [json.loads(line) for line in received.splitlines() if line.strip()]
    assert 0.9 < took < 2.0
    assert len(received) < declared and 5 <= len(lines) <= 12
    assert all(line["left"] is not None and line["left"] <= 1.0 for line in lines)  # in scope
    assert name in wsgi_apps.CLOSED


def test_a_body_that_times_out_before_its_first_chunk_becomes_a_504() -> None:
    """The generator waits on the budget before yielding: headers not sent yet, so a 504."""
    with wsgiref_server(middleware()) as first:
        started = time.monotonic()
        answer = requests.get(
            f"{first}/stream",
            params={"n": "3", "every": "0", "wait_first": "10"},
            headers=caller_headers(0.5),
            timeout=10,
        )
        took = time.monotonic() - started
    assert answer.status_code == 504
    assert answer.json()["reason"] == "deadline_exceeded"
    assert 0.4 < took < 1.5


def test_a_malformed_header_is_ignored_with_one_log_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """grpc-timeout 'soon': the default applies, the request succeeds, one WARNING says why."""
    with (
        caplog.at_level(logging.WARNING, logger="watchdog_sync"),
        wsgiref_server(middleware(default_timeout=2.0)) as first,
    ):
        answer = requests.get(f"{first}/budget", headers={"grpc-timeout": "soon"}, timeout=10)
    assert answer.status_code == 200
    assert 1.5 < answer.json()["left"] <= 2.0
    records = [r for r in caplog.records if "grpc-timeout" in r.getMessage()]
    assert len(records) == 1 and "soon" in records[0].getMessage()


def test_max_timeout_clips_a_greedy_caller() -> None:
    """A caller asking for an hour gets max_timeout."""
    with wsgiref_server(middleware(max_timeout=1.0)) as first:
        answer = requests.get(f"{first}/budget", headers=caller_headers(3600), timeout=10)
    assert 0.5 < answer.json()["left"] <= 1.0


def test_no_header_and_no_default_means_no_limit_of_its_own() -> None:
    with wsgiref_server(middleware()) as first:
        answer = requests.get(f"{first}/budget", timeout=10)
    assert answer.json()["left"] is None


# -- the middleware's rules, called directly (no timing involved) --------------------------


class Recorder:
    """A ``start_response`` that records what it was given."""

    def __init__(self) -> None:
        self.calls: List[Any] = []

    def __call__(self, status: str, headers: List[Any], exc_info: Any = None) -> Any:
        self.calls.append((status, headers, exc_info))
        return lambda data: None


def environ(**headers: str) -> Dict[str, Any]:
    env: Dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/"}
    env.update({f"HTTP_{k.upper()}": v for k, v in headers.items()})
    return env


@pytest.mark.parametrize(
    ("headers", "max_timeout", "default_timeout", "expected"),
    [
        ({}, None, None, None),
        ({}, None, 5.0, 5.0),
        ({}, 2.0, 5.0, 2.0),  # the default is clipped too
        ({}, 2.0, None, 2.0),  # max_timeout caps every request
        ({"grpc_timeout": "3S"}, None, 5.0, 3.0),
        ({"grpc_timeout": "30S"}, 10.0, 5.0, 10.0),
        ({"grpc_timeout": "bad"}, None, 5.0, 5.0),
        ({"x_envoy_expected_rq_timeout_ms": "1500"}, None, None, 1.5),
    ],
)
def test_the_time_of_a_request(
    headers: Dict[str, str], max_timeout: Any, default_timeout: Any, expected: Any
) -> None:
    """incoming-or-default, capped by max_timeout."""
    ware = DeadlineMiddleware(
        wsgi_apps.app, max_timeout=max_timeout, default_timeout=default_timeout
    )
    assert ware.timeout_for(environ(**headers)) == expected


def test_a_deadline_exceeded_after_start_response_replaces_the_status() -> None:
    """The app called start_response, then timed out: the 504 replaces it (exc_info given)."""

    def app(env: Dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        raise ws.DeadlineExceeded("too slow", stage="chat")

    recorder = Recorder()
    body = b"".join(DeadlineMiddleware(app)(environ(), recorder))
    assert json.loads(body) == {"reason": "deadline_exceeded", "stage": "chat"}
    (first, second) = recorder.calls
    assert first[0] == "200 OK" and second[0] == "504 Gateway Timeout"
    assert second[2] is not None and isinstance(second[2][1], ws.DeadlineExceeded)


def test_after_write_a_deadline_exceeded_is_raised_to_the_server() -> None:
    """The legacy write() sent the headers: nothing can be replaced, the server must cut."""

    def app(env: Dict[str, Any], start_response: Any) -> List[bytes]:
        write = start_response("200 OK", [])
        write(b"partial")
        raise ws.DeadlineExceeded("too slow")

    with pytest.raises(ws.DeadlineExceeded):
        DeadlineMiddleware(app)(environ(), Recorder())


def test_other_errors_pass_through() -> None:
    def app(env: Dict[str, Any], start_response: Any) -> List[bytes]:
        raise KeyError("mine")

    with pytest.raises(KeyError):
        DeadlineMiddleware(app)(environ(), Recorder())


def test_the_app_and_its_body_run_inside_the_request_scope_and_close_ends_it() -> None:
    """current_budget() is the request's in the app and in every next(), not outside."""
    seen: List[float] = []
    closed: List[bool] = []

    def app(env: Dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        seen.append(ws.current_budget().remaining())

        def body() -> Iterator[bytes]:
            try:
                for _ in range(2):
                    seen.append(ws.current_budget().remaining())
                    yield b"x"
            finally:
                closed.append(True)

        return body()

    result = DeadlineMiddleware(app)(environ(grpc_timeout="5S"), Recorder())
    chunks = iter(result)
    assert next(chunks) == b"x"
    assert ws.current_budget().deadline is None  # the server's own frames: no scope
    result.close()  # type: ignore[attr-defined]
    assert closed == [True] and len(seen) == 2 and all(0 < left <= 5.0 for left in seen)


def test_a_scope_the_body_opens_stays_open_across_its_yields() -> None:
    """The body runs in the request's own context, so its deadline(0.5) spans its yields."""
    seen: List[float] = []

    def app(env: Dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])

        def body() -> Iterator[bytes]:
            with ws.deadline(0.5):
                for _ in range(3):
                    seen.append(ws.current_budget().remaining())
                    yield b"x"

        return body()

    result = DeadlineMiddleware(app)(environ(grpc_timeout="60S"), Recorder())
    assert b"".join(result) == b"xxx"
    result.close()  # type: ignore[attr-defined]
    assert len(seen) == 3 and all(left <= 0.5 for left in seen)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5", True])
def test_bad_limits_are_rejected(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="max_timeout"):
        DeadlineMiddleware(wsgi_apps.app, max_timeout=bad)


def test_the_app_must_be_callable() -> None:
    with pytest.raises(TypeError, match="WSGI application"):
        DeadlineMiddleware(None)  # type: ignore[arg-type]


def test_import_watchdog_sync_does_not_import_the_wsgi_module() -> None:
    import subprocess
    import sys

    code = "import sys, watchdog_sync; print('watchdog_sync.wsgi' in sys.modules, 'wsgiref' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert out.stdout.split() == ["False", "False"]


def _imported_parts(path: pathlib.Path) -> Set[str]:
    """The package parts (``_core``, ``_propagate``, ...) that a module imports, lazily too."""
    root = pathlib.Path(ws.__file__).parent
    inside = path.parent != root
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            name = (node.module or "").split(".")[0]
            parts.add(path.parent.name if inside and node.level == 1 else name)
    return parts


def test_only_the_door_and_the_wsgi_and_celery_modules_import_the_propagate_part() -> None:
    """_propagate sits above transport: it imports core/retry/transport, and only the door,
    watchdog_sync.wsgi, watchdog_sync.celery and the Ray integration's carrying of the
    wall-clock deadline (_ray/carry.py) import it."""
    root = pathlib.Path(ws.__file__).parent
    importers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.parent.name != "_propagate" and "_propagate" in _imported_parts(path)
    )
    assert importers == ["__init__.py", "_ray/carry.py", "celery.py", "wsgi.py"]
    for path in (root / "_propagate").glob("*.py"):
        assert _imported_parts(path) <= {
            "_propagate",
            "_core",
            "_retry",
            "_http",
            "_stream",
            "_httpx",
        }, path
