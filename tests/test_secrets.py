"""The API key never appears in reprs, errors, events or log records, whatever the server does."""

from __future__ import annotations

import base64
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


# -- every credential a request carries, echoed back, on every path ---------------------------

# One secret per way a request carries one; none has a key's shape, so only the request's
# secret set can mask it.
AUTH = "wsauth-4Hq8Zt2Nc6Vb0Lm3"  # Authorization: Bearer ...
X_API_KEY = "wsxapi-7Rk1Pd5Sg9Wf3Jn2"  # x-api-key (Anthropic's)
API_KEY = "wsazure-2Gt6Ym0Qe4Ux8Kv1"  # api-key (Azure OpenAI's)
GOOG = "wsgoog-5Lw9Bc3Hn7Ds1Ta4"  # x-goog-api-key (google-genai's)
QUERY = "wsquery-8Mv2Xf6Rj0Pe4Wy9"  # ?key= (the Gemini REST API's)
PROXY_PASSWORD = "wsproxy-3Nd7Ks1Va5Gq9Zu6"  # a proxy URL's password
# ... as the proxy gets it: Proxy-Authorization: Basic base64("someone:<password>")
PROXY_TOKEN = base64.b64encode(f"someone:{PROXY_PASSWORD}".encode()).decode()
ALL = (AUTH, X_API_KEY, API_KEY, GOOG, QUERY, PROXY_PASSWORD, PROXY_TOKEN)
ECHOED = ("error_mid_stream", "http401")  # an error event, an error body: both quote them
# Their own access logs print the request line as the caller wrote it, query included.
FOREIGN_LOGGERS = ("urllib3", "httpx", "httpx2", "httpcore", "httpcore2")
CHAT_BODY: Dict[str, Any] = {"model": "m", "messages": MESSAGES, "stream": True}
GEMINI_PATH = "/v1beta/models/m:streamGenerateContent?alt=sse&key=" + QUERY
HEADERS = {"Authorization": f"Bearer {AUTH}", "x-api-key": X_API_KEY, "api-key": API_KEY}


def ours(error: BaseException) -> List[BaseException]:
    """Our errors in ``error``'s chain (an SDK's own error is the SDK's to word)."""
    found: List[BaseException] = []
    pending: List[Any] = [error]
    while pending:
        node = pending.pop()
        if isinstance(node, BaseException) and all(node is not seen for seen in found):
            if isinstance(node, ws.WatchdogError):
                found.append(node)
            pending += [node.__cause__, node.__context__]
    return found


def texts_of(call: Any) -> List[str]:
    """Run ``call``; the texts of our errors it raised (with their fields and chains)."""
    try:
        call()
    except Exception as exc:
        return [text for error in ours(exc) for text in error_texts(error)]
    return []


def proxy_of(gateway: FaultGateway) -> str:
    """The gateway standing in as an HTTP proxy, with a password."""
    return f"http://someone:{PROXY_PASSWORD}@127.0.0.1:{gateway.port}"


def via_stream_sse(gateway: FaultGateway, scenario: str) -> List[str]:
    url = gateway.base_url(scenario, echo=True) + "/chat/completions"
    gemini = gateway.base_url(scenario, api="gemini", echo=True) + GEMINI_PATH
    return texts_of(
        lambda: list(ws.stream_sse(url, json=CHAT_BODY, headers=HEADERS, idle_timeout=2))
    ) + texts_of(
        lambda: list(
            ws.stream_sse(gemini, json={}, headers={"x-goog-api-key": GOOG}, idle_timeout=2)
        )
    )


def via_session(gateway: FaultGateway, scenario: str) -> List[str]:
    url = gateway.base_url(scenario, echo=True) + "/chat/completions"
    with ws.Session() as session:
        session.proxies = {"http": proxy_of(gateway)}
        return texts_of(
            lambda: list(ws.stream_sse(url, json=CHAT_BODY, session=session, idle_timeout=2))
        )


def via_chat_client(gateway: FaultGateway, scenario: str) -> List[str]:
    headers = {"x-api-key": X_API_KEY, "api-key": API_KEY, "x-goog-api-key": GOOG}
    texts: List[str] = []
    with ws.Session() as session:
        session.proxies = {"http": proxy_of(gateway)}
        for method in ("stream", "complete"):
            base = gateway.base_url(scenario, echo=True)
            with ChatClient(
                base, AUTH, model="m", retry=POLICY, headers=headers, session=session
            ) as client:
                texts += run(client, method)
    return texts


def via_openai(gateway: FaultGateway, scenario: str) -> List[str]:
    import openai

    base = gateway.base_url(scenario, echo=True)
    with ws.httpx_client(idle_timeout=2) as http:
        client = openai.OpenAI(
            base_url=base,
            api_key=AUTH,
            default_headers={"api-key": API_KEY},
            http_client=http,
            max_retries=0,
        )
        return texts_of(
            lambda: list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
        )


def via_anthropic(gateway: FaultGateway, scenario: str) -> List[str]:
    import anthropic

    base = gateway.base_url(scenario, api="anthropic", echo=True)
    with ws.httpx_client(idle_timeout=2) as http:
        client = anthropic.Anthropic(
            base_url=base,
            api_key=AUTH,
            default_headers={"x-api-key": X_API_KEY},
            http_client=http,
            max_retries=0,
        )
        return texts_of(
            lambda: list(
                client.messages.create(model="m", max_tokens=8, messages=MESSAGES, stream=True)
            )
        )


def via_google_genai(gateway: FaultGateway, scenario: str) -> List[str]:
    from google import genai
    from google.genai import types

    base = gateway.base_url(scenario, api="gemini", echo=True)
    with ws.httpx_client(idle_timeout=2) as http:
        options = types.HttpOptions(
            base_url=base, httpx_client=http, retry_options=types.HttpRetryOptions(attempts=1)
        )
        client = genai.Client(api_key=GOOG, http_options=options)
        return texts_of(
            lambda: list(client.models.generate_content_stream(model="m", contents="hi"))
        )


def via_httpx_client(gateway: FaultGateway, scenario: str) -> List[str]:
    """The Gemini REST API's ``?key=`` through a proxy named by the environment."""
    url = gateway.base_url(scenario, api="gemini", echo=True) + GEMINI_PATH

    def call() -> None:
        http = ws.httpx_client(idle_timeout=2)
        with http, http.stream("POST", url, json={}, headers=HEADERS) as response:
            response.raise_for_status()
            list(response.iter_lines())

    return texts_of(call)


PATHS = {
    "stream_sse": via_stream_sse,
    "Session": via_session,
    "ChatClient": via_chat_client,
    "openai": via_openai,
    "anthropic": via_anthropic,
    "google-genai": via_google_genai,
    "httpx_client": via_httpx_client,
}
# Paths whose error events and bodies reach the caller as an SDK's own error only (the openai
# SDK reads an OpenAI stream's {"error": ...} itself; every SDK words a status error).
SDK_WORDED = ("openai",)


class ByLogger(logging.Handler):
    """Every record's text, with the name of its logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: List[Tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage() + repr(vars(record))
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.records.append((record.name, text))


@pytest.mark.parametrize("path", sorted(PATHS))
def test_no_credential_a_request_carried_is_shown_when_the_server_echoes_it(
    fault_gateway: FaultGateway, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A server that quotes every credential of the request back, in an error event and in
    an error body: none is in our errors (message, repr, .body, fields, chains), events or
    log records, on every path."""
    monkeypatch.setenv("HTTP_PROXY", proxy_of(fault_gateway))
    monkeypatch.setenv("NO_PROXY", "" if path == "httpx_client" else "127.0.0.1")
    handler = ByLogger()
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    root.addHandler(handler)
    events: List[ws.Event] = []
    unregister = ws.add_listener(events.append)
    try:
        texts = [text for scenario in ECHOED for text in PATHS[path](fault_gateway, scenario)]
    finally:
        unregister()
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    texts += [repr(event) for event in events]
    leaks = [text for text in texts if any(secret in text for secret in ALL)]
    for name, text in handler.records:
        foreign = name.split(".")[0] in FOREIGN_LOGGERS
        if any(secret in text for secret in ALL if not (foreign and secret == QUERY)):
            leaks.append(text)
    assert not leaks, leaks[:3]
    if path not in SDK_WORDED:  # the echo really reached our errors, masked
        assert any("You sent" in text and "[REDACTED]" in text for text in texts), texts[:5]
    seen = fault_gateway.requests_seen()
    assert seen
    if path in ("Session", "ChatClient", "httpx_client"):  # they went through the proxy
        assert all("proxy-authorization" in request.headers for request in seen)
