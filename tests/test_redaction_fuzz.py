"""Fuzz the redaction policy: a random key, planted where a server or a careless caller can put
it, never appears in any string the library produces (messages, reprs, tracebacks with their
causes, events, log records). Bounded: a few seconds in all."""

from __future__ import annotations

import json
import logging
import socket
import threading
import traceback
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import watchdog_sync as ws
from tests.internals import excerpt, redact_module
from tests.rawserver import RawServer, read_request_head

pytestmark = pytest.mark.timeout(120)

# Visible ASCII but brackets (a key made of "[REDACTED]" pieces would be found in the masks).
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "0123456789abcdef",
    "abcdefghijklmnopqrstuvwxyz0123456789-_.~+/=",
    "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "[]"),
]
WHITESPACE = st.sampled_from(["", " ", "\n", "\r\n", "\t", "\ufeff", "\u200b", " \n\u200b"])
# Hypothesis also tries strings it finds in the code under test; a "key" that is a piece of
# our own source (a type name, a message) would be found in texts made without any key.
OWN_TEXT = "\n".join(
    path.read_text("utf-8")
    for root in (Path(ws.__file__).parent, Path(__file__).parent)
    for path in sorted(root.rglob("*.py"))
) + "\n".join((__file__, ws.__file__))
KEYS = (
    st.sampled_from(ALPHABETS)
    .flatmap(lambda alphabet: st.text(st.sampled_from(alphabet), min_size=12, max_size=64))
    .filter(lambda key: key not in OWN_TEXT)
)
FILLER = st.text(st.characters(codec="utf-8", exclude_characters="[]"), max_size=80)
MESSAGES = [{"role": "user", "content": "hi"}]
ONE = ws.RetryPolicy(max_attempts=1)
NET = settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@settings(max_examples=300, deadline=None, database=None)
@given(key=KEYS, before=FILLER, after=FILLER, limit=st.integers(0, 400), wrap=WHITESPACE)
def test_excerpts_never_show_the_key(
    key: str, before: str, after: str, limit: int, wrap: str
) -> None:
    """Plain, JSON-escaped, repr'd or percent-encoded, whole or cut: never the key."""
    for echoed in (key, json.dumps(key), repr(key), urllib.parse.quote(key)):
        text = before + echoed + after
        for shown in (
            excerpt(text, limit, [wrap + key + wrap]),
            excerpt(text[: len(before) + len(echoed) // 2], limit, [key]),  # a bounded read
            str(ws.HTTPStatusError(excerpt(text, limit, [key]), status=500)),
        ):
            assert key not in shown


class Plan:
    """What the fuzz server answers next: ``respond(received Authorization token)``."""

    def __init__(self) -> None:
        self.respond: Callable[[str], bytes] = lambda token: b""
        self.lock = threading.Lock()

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        head = read_request_head(conn).decode("latin-1")
        token = ""
        for line in head.split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() in ("authorization", "x-api-key"):
                token = value.strip().split(" ")[-1]
        with self.lock:
            answer = self.respond(token)
        conn.sendall(answer)


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[tuple]:
    plan = Plan()
    with RawServer(plan, max_connections=1000) as server:
        yield server, plan


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts += [record.getMessage(), repr(vars(record))]


def produced(run: Callable[[], Any]) -> List[str]:
    """Every string a call produced: its error (with the chain), events, log records."""
    events: List[ws.Event] = []
    unregister = ws.add_listener(events.append)
    handler = Collected()
    logger = logging.getLogger("watchdog_sync")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    texts: List[str] = []
    try:
        run()  # what a server sent as data is the caller's to see; what we made of it is not
    except Exception as exc:  # every outcome is looked at, whatever its type
        texts.append("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        node: Optional[BaseException] = exc
        for _ in range(8):
            if node is None:
                break
            texts += [repr(node), repr(vars(node))]
            request = getattr(node, "request", None)
            if request is not None:
                texts += [repr(dict(request.headers)), str(request.url)]
            node = node.__cause__ or getattr(node, "last_error", None)
    finally:
        unregister()
        logger.removeHandler(handler)
        logger.setLevel(level)
    return texts + [repr(event) for event in events] + handler.texts


def http(status: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Connection: close", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def sse(data: str) -> bytes:
    return http("200 OK", f"data: {data}\n\n".encode(), Content_Type="text/event-stream")


SERVER_PLACES: Dict[str, Callable[[str], bytes]] = {
    "error body": lambda k: http("500 Oops", json.dumps({"error": {"message": k}}).encode()),
    "401 body": lambda k: http("401 No", f"Incorrect API key provided: {k}".encode()),
    "event": lambda k: sse(k + " is not json"),
    "error event": lambda k: sse(json.dumps({"error": {"message": f"bad key {k}", "code": 401}})),
    "reason phrase": lambda k: http(f"500 key {k} refused", b"{}"),
    "content type": lambda k: http("200 OK", b"x", Content_Type=f"text/plain; key={k}"),
    "location": lambda k: http(
        "307 Moved", Location=f"http://u:{urllib.parse.quote(k, safe='')}@127.0.0.1:9/?key={k}"
    ),
}


@NET
@given(key=KEYS, wrap=WHITESPACE, place=st.sampled_from(sorted(SERVER_PLACES)))
@pytest.mark.parametrize("entry", ["complete", "stream", "stream_sse"])
def test_a_key_a_server_echoes_is_never_shown(
    fuzz_server: tuple, entry: str, key: str, wrap: str, place: str
) -> None:
    server, plan = fuzz_server
    with plan.lock:
        plan.respond = SERVER_PLACES[place]  # echoes the token it received
    url = server.url + "/v1"

    def run() -> Any:
        if entry == "stream_sse":
            headers = {"X-Api-Key": wrap + key + wrap}
            with ws.stream_sse(url, json={}, headers=headers, idle_timeout=5) as events:
                return [event.data for event in events]
        with ws.ChatClient(url, wrap + key + wrap, model="m", timeout=5, retry=ONE) as client:
            if entry == "complete":
                return client.complete(MESSAGES)
            with client.stream(MESSAGES) as stream:
                return list(stream)

    texts = produced(run)
    assert not [text for text in texts if key in text]


def refused_url(userinfo: str = "") -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://{userinfo}127.0.0.1:{sock.getsockname()[1]}/v1"


@NET
@given(key=KEYS, wrap=WHITESPACE, how=st.sampled_from(["api_key", "header", "userinfo", "query"]))
def test_a_key_in_a_failed_request_is_never_shown(key: str, wrap: str, how: str) -> None:
    """Refused connections: the key sits in the request (headers, URL) the cause carries."""
    quoted = urllib.parse.quote(key, safe="")

    def run() -> Any:
        if how == "api_key":
            with ws.ChatClient(refused_url(), wrap + key + wrap, model="m", retry=ONE) as client:
                return client.complete(MESSAGES)
        if how == "header":
            with (
                ws.ChatClient(
                    refused_url(), model="m", retry=ONE, headers={"api-key": wrap + key + wrap}
                ) as client,
                client.stream(MESSAGES) as stream,
            ):
                return list(stream)
        url = refused_url(f"user:{quoted}@") if how == "userinfo" else refused_url()
        if how == "query":
            url += f"/x?api_key={quoted}"
        with ws.stream_sse(url, json={}) as events:
            return list(events)

    texts = produced(run)
    assert not [text for text in texts if key in text or (len(quoted) > 11 and quoted in text)]


# Pieces of every credential shape the patterns know, in several cases, and what sits around them.
PATTERN_PIECES = st.sampled_from(
    [
        "https://",
        "HTTP://",
        "u:p@",
        "@",
        "Bearer ",
        "bEaReR\t",
        "AUTHORIZATION: ",
        "proxy-authorization=",
        "api_key=",
        "X-API-KEY: ",
        "access-token=",
        "Refresh_Token:",
        "token",
        "SECRET=",
        "password: ",
        "?key=",
        "&SIG=",
        "?code=",
        "&signature=",
        "sk-",
        "sk-abcdefgh",
        "SK-ABCDEFGH",
        "=",
        "?",
        "&",
        '"',
        "'",
        " ",
        ":",
        "abc123",
        "[REDACTED]",
    ]
)
ASCII_FILLER = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=6)


@settings(max_examples=2000, deadline=None, database=None)
@given(pieces=st.lists(PATTERN_PIECES | ASCII_FILLER, max_size=14))
def test_the_ascii_fast_path_masks_exactly_what_every_pattern_masks(pieces: List[str]) -> None:
    """On ASCII text redaction skips the patterns whose trigger is absent; the result is the
    same as running every pattern."""
    text = "".join(pieces)
    every = text
    for pattern, replacement in redact_module._PATTERNS:
        every = pattern.sub(replacement, every)
    assert redact_module._redact(text, ()) == every
