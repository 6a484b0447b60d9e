"""The API key never appears in reprs, errors, events or log records, whatever the server does."""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterator, List, Tuple

import pytest

import watchdog_sync as ws
from watchdog_sync import ChatClient
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(60)

KEY = "wsfake-9Qz7Lk2Vd4Xr8Tb1"  # no "sk-" shape: only explicit redaction can hide it
MESSAGES = [{"role": "user", "content": "hi"}]
POLICY = ws.RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=0.0)
ECHO = {"message": f"Incorrect API key provided: {KEY}. Bearer {KEY} is not valid."}
FAST = {"interval": 0.05}

SCENARIOS: List[Tuple[str, Dict[str, Any]]] = [
    ("ok", {}),
    ("silent_after_200", {}),
    ("silent_then_ok", {}),
    ("stall_after_chunks", {}),
    ("slow_drip", FAST),
    ("keepalive_only", FAST),
    ("no_headers", {}),
    ("reset_before_headers", {}),
    ("reset_mid_stream", {}),
    ("http400", ECHO),
    ("http401", ECHO),
    ("http429", {**ECHO, "retry_after": 0.01}),
    ("http500", ECHO),
    ("http_error", {**ECHO, "status": 403}),
    ("no_finish_reason", {}),
    ("malformed_json", {}),
    ("invalid_utf8", {}),
    ("oversized_event", {"size": 9 * 1024 * 1024}),
]
LOGGERS = ("", "watchdog_sync", "urllib3", "requests", "sseclient")


class Capture(logging.Handler):
    """Keeps every record's message and every attribute (``extra`` included) as text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())
        self.texts.append(repr(vars(record)))
        if record.exc_info:
            self.texts.append(logging.Formatter().formatException(record.exc_info))


@pytest.fixture
def capture() -> Iterator[Capture]:
    handler = Capture()
    levels = {name: logging.getLogger(name).level for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def error_texts(error: BaseException) -> List[str]:
    """str and repr of an error, its fields, and everything chained to it."""
    texts: List[str] = []
    pending: List[BaseException] = [error]
    seen: List[int] = []
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.append(id(node))
        texts += [str(node), repr(node), repr(node.args)]
        texts += [repr(value) for value in vars(node).values()]
        for linked in (node.__cause__, node.__context__, getattr(node, "last_error", None)):
            if isinstance(linked, BaseException):
                pending.append(linked)
    return texts


def run(client: ChatClient, method: str) -> List[str]:
    """One call to the end; the texts of whatever it produced."""
    texts: List[str] = [repr(client), str(client)]
    try:
        if method == "stream":
            with client.stream(MESSAGES) as stream:
                texts += [repr(chunk) for chunk in stream]
            texts += [repr(stream), stream.text, repr(stream.stats)]
        else:
            texts.append(repr(client.complete(MESSAGES)))
    except ws.WatchdogError as exc:
        texts += error_texts(exc)
    return texts


def test_the_key_appears_nowhere_across_a_full_fault_run(
    fault_gateway: FaultGateway, capture: Capture
) -> None:
    events: List[ws.Event] = []
    unregister = ws.add_listener(events.append)
    texts: List[str] = []
    bases = []
    try:
        for scenario, options in SCENARIOS:
            for method in ("stream", "complete"):
                base = fault_gateway.base_url(scenario, **options)
                bases.append(base)
                with ChatClient(
                    base,
                    KEY,
                    model="m",
                    timeout=0.5,
                    idle_timeout=0.2,
                    retry=POLICY,
                    headers={"X-Api-Key": KEY},
                ) as client:
                    texts += run(client, method)
    finally:
        unregister()
    texts += [repr(event) for event in events]
    texts += capture.texts
    leaks = [text for text in texts if KEY in text]
    assert not leaks, leaks[:3]
    # The run really produced what was checked: server errors quoting the key, events, logs.
    assert any("Incorrect API key provided" in text for text in texts)
    assert any("[REDACTED]" in text for text in texts)
    assert {"attempt_failed", "backoff", "stream_end", "first_byte"} <= {e.event for e in events}
    assert any("Starting new HTTP connection" in text for text in capture.texts)  # urllib3
    assert any("attempt_start" in text for text in capture.texts)  # watchdog_sync


def test_the_gateway_saw_the_credentials_and_records_them_redacted(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("ok")
    with ChatClient(base, KEY, model="m", headers={"X-Api-Key": KEY}) as client:
        client.complete(MESSAGES)
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.headers["authorization"] == "[REDACTED]"
    assert seen.headers["x-api-key"] == "[REDACTED]"
    assert KEY not in repr(seen)
