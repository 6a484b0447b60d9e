"""The fault matrix: ChatClient and today's clients against every FaultGateway incident.

Usage: python benchmarks/fault_matrix.py [--jobs 3] [--scenarios a,b] [--clients x,y]

Needs the benchmark extra for the peers: ``pip install -e ".[bench]"`` (openai,
anthropic, httpx, httpx2, httpx-sse, tenacity, stamina; google-genai and litellm
for their columns); ``--clients ChatClient`` runs without it.

Every client is configured as a competent user would, for a total deadline
D = 4 s and an idle (read) timeout I = 1 s. The ``*_httpx_client`` columns are
the SDKs as docs/howto-keep-your-sdk.md has them: ``http_client=httpx_client(
idle_timeout=I)``, the call inside ``deadline(D)``, the SDK's own retries left
at their default (google-genai's are off: ``retry_call`` owns them). The
``*_instrument`` columns are the SDKs with their defaults after ``instrument()``,
the call inside ``deadline(D)``; the ``*_instrument_idle`` columns the same after
``instrument(request_timeout=D, idle_timeout=I)``. The
anthropic columns talk to the gateway's Anthropic Messages API rendering of
each scenario, the google_genai columns to its Gemini API rendering (a 429's
Retry-After is the body's ``RetryInfo.retryDelay`` there). Each call runs in its own
process, killed 10 s after it started (a HANG); the FaultGateway runs in this
process on 127.0.0.1, with a fresh base_url per call, so the requests a call
sent are counted exactly. The clients of one scenario run ``--jobs`` at a time.
The rows: the 16 incidents of the project's first survey of these clients,
then 7 more that the gateway has (the last two: a head that never ends, as
``103 Early Hints`` every 0.3 s or one header line every 0.3 s).

A call passes when it does what its scenario expects:

- success: the whole answer (the full text and a finish_reason);
- deadline_error, error: an exception (a normal return without finish_reason
  is a silent truncation);
- fast_fail: an exception after exactly one request, within I;
- bounded_error: an exception, and the process's peak RSS grew by less than 64 MiB;

and, whatever the scenario, it ended by D + 0.1 s (an overshoot fails).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Tuple

import requests
import sseclient

from watchdog_sync import ChatClient, WatchdogError, deadline
from watchdog_sync.testing import FaultGateway

DEADLINE = 4.0  # D: the whole call
IDLE = 1.0  # I: the idle / read timeout
SLACK = 0.1  # a call must end by D + SLACK
KILL_AFTER = 10.0  # a call still running then is a HANG
FAST = IDLE  # a fast failure ends within this
RSS_LIMIT_MIB = 64.0
STARTUP_LIMIT = 60.0  # a child's imports and client set-up (not timed)

TEXT = "Hello from the fault matrix."
MODEL = "bench-model"
API_KEY = "sk-bench-0000"
GEMINI_KEY = "AIza-bench-0000"
MESSAGES = [{"role": "user", "content": "Say hello."}]
# The *_instrument_idle columns: instrument() with a request timeout D and an idle limit I.
IDLE_OPTIONS: Dict[str, float] = {"request_timeout": DEADLINE, "idle_timeout": IDLE}

# (scenario, expected outcome), default options: the rows of the first survey of the peers.
SCENARIOS: Sequence[Tuple[str, str]] = (
    ("ok", "success"),
    ("silent_after_200", "deadline_error"),
    ("stall_after_chunks", "deadline_error"),
    ("slow_drip", "deadline_error"),
    ("keepalive_only", "deadline_error"),
    ("no_headers", "deadline_error"),
    ("reset_mid_stream", "error"),
    ("silent_then_ok", "success"),
    ("reset_then_ok", "success"),
    ("http500_then_ok", "success"),
    ("http429_then_ok", "success"),
    ("http401", "fast_fail"),
    ("http400", "fast_fail"),
    ("no_finish_reason", "error"),
    ("malformed_json", "error"),
    ("huge_line", "bounded_error"),
)
# More incidents the gateway has, beyond the survey.
MORE_SCENARIOS: Sequence[Tuple[str, str]] = (
    ("reset_before_headers", "error"),
    ("http429", "error"),
    ("http503", "error"),
    ("invalid_utf8", "error"),
    ("oversized_event", "bounded_error"),
    ("early_hints_flood", "deadline_error"),
    ("header_drip", "deadline_error"),
)
EXPECTED: Dict[str, str] = dict((*SCENARIOS, *MORE_SCENARIOS))
PEER_MODULES = ("openai", "anthropic", "httpx", "httpx2", "httpx_sse", "tenacity", "stamina")
# Needed only by their own columns.
COLUMN_MODULES = {
    "google_genai": "google.genai",
    "google_genai_httpx_client": "google.genai",
    "google_genai_instrument": "google.genai",
    "google_genai_instrument_idle": "google.genai",
    "litellm_sdk": "litellm",
    "litellm_sdk_instrument": "litellm",
    "litellm_sdk_instrument_idle": "litellm",
}


# -- what a client got back ------------------------------------------------------------


class Answer:
    """The chunks a client delivered: their count, the text and the finish_reason."""

    def __init__(self) -> None:
        self.chunks = 0
        self.parts: List[str] = []
        self.finish_reason: Optional[str] = None

    def add(self, content: Optional[str], finish_reason: Optional[str]) -> None:
        self.chunks += 1
        if content:
            self.parts.append(content)
        if finish_reason:
            self.finish_reason = finish_reason

    def add_dict(self, chunk: Dict[str, Any]) -> None:
        """Add a parsed ``chat.completion.chunk`` (the usage-only chunk has no choices)."""
        choices = chunk.get("choices") or [{}]
        choice = choices[0]
        self.add((choice.get("delta") or {}).get("content"), choice.get("finish_reason"))


# -- the clients, as a competent user configures them -----------------------------------
# Each takes the base_url and returns the call to time: imports and set-up happen first.

Call = Callable[[], Answer]


def chat_client(base_url: str) -> Call:
    """watchdog_sync: one budget of D for the whole call, idle timeout I, default retries."""
    client = ChatClient(base_url, API_KEY, model=MODEL, timeout=DEADLINE, idle_timeout=IDLE)

    def call() -> Answer:
        answer = Answer()
        with client, client.stream(MESSAGES) as stream:
            for chunk in stream:
                answer.add_dict(chunk)
        return answer

    return call


def _requests_sse_once(base_url: str) -> Answer:
    """One attempt with requests + sseclient-py: read timeout I (no total: requests has none)."""
    response = requests.post(
        base_url + "/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "stream": True},
        headers={"Authorization": f"Bearer {API_KEY}"},
        stream=True,
        timeout=(DEADLINE, IDLE),
    )
    with response:
        response.raise_for_status()
        answer = Answer()
        for event in sseclient.SSEClient(response).events():
            if event.data == "[DONE]":
                break
            answer.add_dict(json.loads(event.data))
        return answer


def requests_sseclient(base_url: str) -> Call:
    """requests + sseclient-py in the usual loop: 3 attempts, backoff 0.5 s doubling."""

    def call() -> Answer:
        failures = 0
        while True:
            try:
                return _requests_sse_once(base_url)
            except Exception:  # the loop being measured: retry on anything, as such loops do
                failures += 1
                if failures == 3:
                    raise
                time.sleep(0.5 * 2 ** (failures - 1))

    return call


def tenacity_requests(base_url: str) -> Call:
    """The same attempt under tenacity: stop after D or 5 attempts, exponential wait."""
    import tenacity

    retrying = tenacity.retry(
        stop=tenacity.stop_after_delay(DEADLINE) | tenacity.stop_after_attempt(5),
        wait=tenacity.wait_exponential(multiplier=0.5, max=2),
        reraise=True,
    )
    return lambda: retrying(_requests_sse_once)(base_url)


def stamina_requests(base_url: str) -> Call:
    """The same attempt under stamina: retry on any Exception for at most D."""
    import stamina

    retrying = stamina.retry(on=Exception, timeout=DEADLINE)
    return lambda: retrying(_requests_sse_once)(base_url)


def _openai(base_url: str, **settings: Any) -> Call:
    import openai

    return _openai_call(openai.OpenAI(base_url=base_url, api_key=API_KEY, **settings))


def _openai_call(client: Any) -> Call:
    completions = client.chat.completions  # loads the SDK's lazy modules before the clock starts

    def call() -> Answer:
        answer = Answer()
        with client:
            stream = completions.create(model=MODEL, messages=MESSAGES, stream=True)
            with stream:
                for chunk in stream:
                    if chunk.choices:
                        choice = chunk.choices[0]
                        answer.add(choice.delta.content, choice.finish_reason)
                    else:
                        answer.add(None, None)
        return answer

    return call


def openai_sdk(base_url: str) -> Call:
    """The OpenAI SDK, timeouts tuned (read I; connect, write and pool D), its own retries."""
    import httpx

    return _openai(base_url, timeout=httpx.Timeout(DEADLINE, read=IDLE, connect=DEADLINE))


def openai_sdk_defaults(base_url: str) -> Call:
    """The OpenAI SDK as most code has it: defaults (read timeout 600 s, 2 retries)."""
    return _openai(base_url)


def _instrumented(sdk_call: Call, **options: Any) -> Call:
    """``sdk_call`` inside ``deadline(D)``, after ``instrument(**options)`` (applied now, as a
    program applies it at start-up: its one-time imports are not part of the call); undone after."""
    import watchdog_sync as ws

    undo = ws.instrument(**options)

    def call() -> Answer:
        try:
            with ws.deadline(DEADLINE):
                return sdk_call()
        finally:
            undo()

    return call


def openai_sdk_instrument(base_url: str) -> Call:
    """The OpenAI SDK with its defaults, after ``instrument()``, the call inside ``deadline(D)``."""
    return _instrumented(_openai(base_url))


def openai_sdk_instrument_idle(base_url: str) -> Call:
    """The OpenAI SDK with its defaults, after ``instrument(request_timeout=D, idle_timeout=I)``,
    the call inside ``deadline(D)``."""
    return _instrumented(_openai(base_url), **IDLE_OPTIONS)


def httpx_sse(base_url: str) -> Call:
    """httpx + httpx-sse: read timeout I, D for the rest; no retries, no total deadline."""
    import httpx
    import httpx_sse as sse

    client = httpx.Client(timeout=httpx.Timeout(DEADLINE, read=IDLE))
    url = base_url + "/chat/completions"
    request = {
        "json": {"model": MODEL, "messages": MESSAGES, "stream": True},
        "headers": {"Authorization": f"Bearer {API_KEY}"},
    }

    def call() -> Answer:
        answer = Answer()
        with client, sse.connect_sse(client, "POST", url, **request) as source:
            source.response.raise_for_status()
            for event in source.iter_sse():
                if event.data == "[DONE]":
                    break
                answer.add_dict(json.loads(event.data))
        return answer

    return call


def openai_sdk_httpx_client(base_url: str) -> Call:
    """The OpenAI SDK on ``httpx_client(idle_timeout=I)``, default retries, in ``deadline(D)``."""
    import openai

    from watchdog_sync import httpx_client

    client = openai.OpenAI(
        base_url=base_url, api_key=API_KEY, http_client=httpx_client(idle_timeout=IDLE)
    )
    return _in_deadline(_openai_call(client))


def _anthropic_call(client: Any) -> Call:
    messages = client.messages  # loads the SDK's lazy modules before the clock starts

    def call() -> Answer:
        answer = Answer()
        with client:
            events = messages.create(model=MODEL, max_tokens=64, messages=MESSAGES, stream=True)
            with events:
                for event in events:
                    add_anthropic_event(answer, event)
        return answer

    return call


def add_anthropic_event(answer: Answer, event: Any) -> None:
    """Add one Messages API stream event: text from ``content_block_delta``, stop from
    ``message_delta``; the other events (message_start, ping, ...) count as chunks."""
    delta = getattr(event, "delta", None)
    if event.type == "content_block_delta" and delta.type == "text_delta":
        answer.add(delta.text, None)
    elif event.type == "message_delta":
        answer.add(None, delta.stop_reason)
    else:
        answer.add(None, None)


def anthropic_sdk(base_url: str) -> Call:
    """The Anthropic SDK, timeouts tuned as openai_sdk's (read I, the rest D), its retries."""
    import anthropic
    import httpx2

    timeout = httpx2.Timeout(DEADLINE, read=IDLE, connect=DEADLINE)
    return _anthropic_call(anthropic.Anthropic(base_url=base_url, api_key=API_KEY, timeout=timeout))


def anthropic_sdk_httpx_client(base_url: str) -> Call:
    """The Anthropic SDK on ``httpx_client(idle_timeout=I)``, default retries, in ``deadline(D)``."""
    import anthropic

    from watchdog_sync import httpx_client

    client = anthropic.Anthropic(
        base_url=base_url, api_key=API_KEY, http_client=httpx_client(idle_timeout=IDLE)
    )
    return _in_deadline(_anthropic_call(client))


def anthropic_sdk_instrument(base_url: str) -> Call:
    """The Anthropic SDK with its defaults, after ``instrument()``, inside ``deadline(D)``."""
    import anthropic

    return _instrumented(_anthropic_call(anthropic.Anthropic(base_url=base_url, api_key=API_KEY)))


def _in_deadline(call: Call) -> Call:
    def bounded() -> Answer:
        with deadline(DEADLINE):
            return call()

    return bounded


def _genai_call(client: Any) -> Call:
    models = client.models  # the SDK's modules load before the clock starts

    def call() -> Answer:
        answer = Answer()
        # ``client`` is used here: collected, it would close its httpx client under ``models``.
        assert client.models is models
        for chunk in models.generate_content_stream(model=MODEL, contents="Say hello."):
            candidate = chunk.candidates[0] if chunk.candidates else None
            reason = None if candidate is None else candidate.finish_reason
            parts = candidate.content.parts if candidate and candidate.content else None
            text = "".join(p.text or "" for p in parts or [])
            answer.add(text, None if reason is None else str(getattr(reason, "value", reason)))
        return answer

    return call


def google_genai(base_url: str) -> Call:
    """google-genai tuned: timeout I (its one timeout, per request phase and read) and its own
    retries (HttpRetryOptions: 3 attempts, 0.5 s doubling up to 2 s, its default statuses)."""
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        base_url=base_url,
        timeout=int(IDLE * 1000),  # milliseconds
        retry_options=types.HttpRetryOptions(attempts=3, initial_delay=0.5, max_delay=2.0),
    )
    return _genai_call(genai.Client(api_key=GEMINI_KEY, http_options=options))


def _genai_untimed(base_url: str, **options: Any) -> Call:
    from google import genai
    from google.genai import types

    http_options = types.HttpOptions(base_url=base_url, **options)
    return _genai_call(genai.Client(api_key=GEMINI_KEY, http_options=http_options))


def google_genai_instrument(base_url: str) -> Call:
    """google-genai with its defaults (no timeout, no retries), after ``instrument()``, the call
    inside ``deadline(D)``."""
    return _instrumented(_genai_untimed(base_url))


def google_genai_instrument_idle(base_url: str) -> Call:
    """google-genai with no timeout of its own but its retries on (it retries nothing by
    default, and instrument() adds no retries: HttpRetryOptions as google_genai has them),
    after ``instrument(request_timeout=D, idle_timeout=I)``, the call inside ``deadline(D)``."""
    from google.genai import types

    retries = types.HttpRetryOptions(attempts=3, initial_delay=0.5, max_delay=2.0)
    return _instrumented(_genai_untimed(base_url, retry_options=retries), **IDLE_OPTIONS)


def google_genai_httpx_client(base_url: str) -> Call:
    """google-genai on ``httpx_client(idle_timeout=I)``, its retries off, ``retry_call`` (default
    policy) the one retry owner, in ``deadline(D)``."""
    from google import genai
    from google.genai import types

    from watchdog_sync import httpx_client, retry_call

    options = types.HttpOptions(
        base_url=base_url,
        httpx_client=httpx_client(idle_timeout=IDLE),
        retry_options=types.HttpRetryOptions(attempts=1),
    )
    attempt = _genai_call(genai.Client(api_key=GEMINI_KEY, http_options=options))
    return _in_deadline(lambda: retry_call(attempt))


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its cost map
    import litellm

    litellm.suppress_debug_info = True  # it prints to stdout, which carries our results
    return litellm


def _litellm_call(base_url: str, **settings: Any) -> Call:
    litellm = _litellm()

    def call() -> Answer:
        answer = Answer()
        chunks = litellm.completion(
            model="openai/" + MODEL,
            messages=MESSAGES,
            stream=True,
            api_base=base_url,
            api_key=API_KEY,
            **settings,
        )
        for chunk in chunks:
            if chunk.choices:
                choice = chunk.choices[0]
                answer.add(choice.delta.content, choice.finish_reason)
            else:
                answer.add(None, None)
        return answer

    return call


def litellm_sdk(base_url: str) -> Call:
    """The LiteLLM SDK tuned: timeout D, stream_timeout I (both per read), 2 retries."""
    return _litellm_call(base_url, timeout=DEADLINE, stream_timeout=IDLE, max_retries=2)


def litellm_sdk_instrument(base_url: str) -> Call:
    """The LiteLLM SDK with its defaults, after ``instrument()``, the call inside ``deadline(D)``."""
    return _instrumented(_litellm_call(base_url))


def litellm_sdk_instrument_idle(base_url: str) -> Call:
    """The LiteLLM SDK with its defaults, after ``instrument(request_timeout=D, idle_timeout=I)``,
    the call inside ``deadline(D)``."""
    return _instrumented(_litellm_call(base_url), **IDLE_OPTIONS)


CLIENTS: Dict[str, Callable[[str], Call]] = {
    "ChatClient": chat_client,
    "requests_sseclient": requests_sseclient,
    "openai_sdk": openai_sdk,
    "openai_sdk_defaults": openai_sdk_defaults,
    "openai_sdk_instrument": openai_sdk_instrument,
    "openai_sdk_instrument_idle": openai_sdk_instrument_idle,
    "httpx_sse": httpx_sse,
    "tenacity_requests": tenacity_requests,
    "stamina_requests": stamina_requests,
    "openai_sdk_httpx_client": openai_sdk_httpx_client,
    "anthropic_sdk": anthropic_sdk,
    "anthropic_sdk_httpx_client": anthropic_sdk_httpx_client,
    "anthropic_sdk_instrument": anthropic_sdk_instrument,
    "google_genai": google_genai,
    "google_genai_httpx_client": google_genai_httpx_client,
    "google_genai_instrument": google_genai_instrument,
    "google_genai_instrument_idle": google_genai_instrument_idle,
    "litellm_sdk": litellm_sdk,
    "litellm_sdk_instrument": litellm_sdk_instrument,
    "litellm_sdk_instrument_idle": litellm_sdk_instrument_idle,
}
# The clients that speak the Anthropic Messages API (the gateway's api="anthropic" routes)
# and the Gemini API (api="gemini").
ANTHROPIC_CLIENTS = frozenset(
    {"anthropic_sdk", "anthropic_sdk_httpx_client", "anthropic_sdk_instrument"}
)
GEMINI_CLIENTS = frozenset(
    {
        "google_genai",
        "google_genai_httpx_client",
        "google_genai_instrument",
        "google_genai_instrument_idle",
    }
)


def base_url(gateway: FaultGateway, scenario: str, client: str) -> str:
    """A fresh route for one call, in the wire format the client speaks."""
    api = "anthropic" if client in ANTHROPIC_CLIENTS else "openai"
    if client in GEMINI_CLIENTS:
        api = "gemini"
    return gateway.base_url(scenario, api=api, text=TEXT)


# -- one call ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Run:
    """What one call did. ``outcome``: returned, error, hang or crash."""

    scenario: str
    client: str
    outcome: str
    elapsed: float
    requests: int
    error: Optional[str] = None
    chunks: int = 0
    finish_reason: Optional[str] = None
    text_ok: bool = False
    rss_growth_mib: Optional[float] = None


def execute(client: str, base_url: str, started: Callable[[], None]) -> Dict[str, Any]:
    """Set the client up, call ``started()``, then time one call; return what it did."""
    call = CLIENTS[client](base_url)
    started()
    begin = time.monotonic()
    try:
        answer = call()
    except Exception as exc:  # the matrix records every failure of every client
        return {"outcome": "error", "elapsed": time.monotonic() - begin, "error": _name(exc)}
    return {
        "outcome": "returned",
        "elapsed": time.monotonic() - begin,
        "chunks": answer.chunks,
        "finish_reason": answer.finish_reason,
        "text_ok": "".join(answer.parts) == TEXT,
    }


def _name(exc: BaseException) -> str:
    """``StreamIdleTimeout(idle)``; an SDK error caused by one of ours names both."""
    if isinstance(exc, WatchdogError):
        return f"{type(exc).__name__}({exc.reason})"
    if isinstance(exc.__cause__, WatchdogError):
        return f"{type(exc).__name__} from {_name(exc.__cause__)}"
    return type(exc).__name__


def run_in_process(scenario: str, client: str, gateway: FaultGateway) -> Run:
    """One call in this process (no RSS figure, no hard kill): for quick checks."""
    url = base_url(gateway, scenario, client)
    result = execute(client, url, lambda: None)
    return Run(scenario, client, requests=len(gateway.requests_seen(url)), **result)


def run_in_child(scenario: str, client: str, gateway: FaultGateway) -> Run:
    """One call in its own process, killed ``KILL_AFTER`` s after its start."""
    url = base_url(gateway, scenario, client)
    command = [sys.executable, os.path.abspath(__file__), "--child", client, url]
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors)
        assert process.stdout is not None
        lines: queue.Queue[Optional[bytes]] = queue.Queue()
        pump = threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True)
        pump.start()
        try:
            result = _follow(process, lines)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            pump.join(5)
            process.stdout.close()
        if result is None:
            errors.seek(0)
            tail = errors.read().decode("utf-8", "replace").strip().splitlines()[-1:]
            result = {"outcome": "crash", "elapsed": 0.0, "error": " ".join(tail) or "no output"}
    return Run(scenario, client, requests=len(gateway.requests_seen(url)), **result)


def _pump(stream: IO[bytes], lines: queue.Queue[Optional[bytes]]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _follow(
    process: subprocess.Popen[bytes], lines: queue.Queue[Optional[bytes]]
) -> Optional[Dict[str, Any]]:
    """The child's result, a hang after ``KILL_AFTER`` (the caller kills it), None if it died."""
    try:
        first = lines.get(timeout=STARTUP_LIMIT)
    except queue.Empty:
        return None
    if first is None:
        return None
    baseline_kib = json.loads(first)["rss_kib"]
    try:
        last = lines.get(timeout=KILL_AFTER)
    except queue.Empty:
        peak_kib = _status_kib("VmHWM", process.pid)  # the caller kills it next
        return {
            "outcome": "hang",
            "elapsed": KILL_AFTER,
            "rss_growth_mib": _mib(peak_kib, baseline_kib),
        }
    if last is None:
        return None
    result: Dict[str, Any] = json.loads(last)
    result["rss_growth_mib"] = _mib(result.pop("hwm_kib"), baseline_kib)
    return result


def _mib(peak_kib: Optional[int], baseline_kib: Optional[int]) -> Optional[float]:
    if peak_kib is None or baseline_kib is None:
        return None
    return (peak_kib - baseline_kib) / 1024


def _status_kib(field: str, pid: Optional[int] = None) -> Optional[int]:
    """A ``/proc/<pid>/status`` memory field in KiB (VmRSS, VmHWM); None if unreadable."""
    try:
        with open(f"/proc/{pid or 'self'}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _child(client: str, base_url: str) -> None:
    """In the child: report the RSS before the call, then the call's result and peak RSS."""

    def started() -> None:
        print(json.dumps({"rss_kib": _status_kib("VmRSS")}), flush=True)

    result = execute(client, base_url, started)
    result["hwm_kib"] = _status_kib("VmHWM")
    print(json.dumps(result), flush=True)


# -- judging -------------------------------------------------------------------------------


def judge(run: Run) -> Tuple[bool, str]:
    """PASS or FAIL under the survey's rules (see the module docstring), and the table cell."""
    if run.outcome == "hang":
        return False, f"HANG >{KILL_AFTER:.0f}s"
    expected = EXPECTED[run.scenario]
    problems: List[str] = []
    if run.outcome == "crash":
        problems.append(f"crashed: {run.error}")
    elif expected == "success":
        if run.outcome == "error":
            problems.append(f"error {run.error}")
        elif run.finish_reason is None:
            problems.append(f"silent truncation ({run.chunks} chunks, finish_reason=None)")
        elif not run.text_ok:
            problems.append("wrong text")
    elif run.outcome == "returned":
        if run.finish_reason is None:
            problems.append(f"silent truncation ({run.chunks} chunks, finish_reason=None)")
        else:
            problems.append(f"no error ({run.chunks} chunks, finish_reason={run.finish_reason})")
    if run.elapsed > DEADLINE + SLACK:
        problems.append(f"overshoot +{run.elapsed - DEADLINE:.1f}s")
    if expected == "fast_fail":
        if run.requests > 1:
            problems.append(f"retried ({run.requests} requests)")
        if run.elapsed > FAST:
            problems.append(f"slow ({run.elapsed:.1f}s)")
    growth = run.rss_growth_mib
    if growth is not None and growth >= RSS_LIMIT_MIB:
        problems.append(f"RSS +{growth:.0f}MiB")
    cell = f"{run.elapsed:.2f}s, {run.requests} req"
    if expected == "bounded_error" and growth is not None and growth < RSS_LIMIT_MIB:
        cell += f", RSS +{growth:.0f}MiB"
    if problems:
        return False, f"FAIL {cell}: {'; '.join(problems)}"
    return True, f"PASS {cell}"


# -- the matrix ------------------------------------------------------------------------------


def run_matrix(
    scenarios: Sequence[str], clients: Sequence[str], jobs: int, out: IO[str]
) -> Dict[Tuple[str, str], Run]:
    """Every client on every scenario, each call in its own process; progress to ``out``."""
    runs: Dict[Tuple[str, str], Run] = {}
    total, done = len(scenarios) * len(clients), 0
    with FaultGateway() as gateway, concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for scenario in scenarios:  # one scenario at a time: a CPU-heavy row stays in its row
            futures = [pool.submit(run_in_child, scenario, c, gateway) for c in clients]
            for future in concurrent.futures.as_completed(futures):
                run = future.result()
                runs[(scenario, run.client)] = run
                done += 1
                detail = run.error or (
                    "killed"
                    if run.outcome == "hang"
                    else f"{run.chunks} chunks, finish_reason={run.finish_reason}"
                )
                print(
                    f"[{done:>3}/{total}] {scenario:<18} {run.client:<20} {judge(run)[1]}  ({detail})",
                    file=out,
                    flush=True,
                )
    return runs


def table(
    runs: Dict[Tuple[str, str], Run], scenarios: Sequence[str], clients: Sequence[str]
) -> str:
    """The matrix as a Markdown table, with PASS counts per client (the survey's rows apart)."""
    lines = [
        "| scenario (expected) | " + " | ".join(clients) + " |",
        "|---" * (len(clients) + 1) + "|",
    ]
    passed = {key: judge(run)[0] for key, run in runs.items()}
    for scenario in scenarios:
        cells = " | ".join(judge(runs[(scenario, client)])[1] for client in clients)
        lines.append(f"| {scenario} ({EXPECTED[scenario]}) | {cells} |")
    survey = [name for name, _ in SCENARIOS if name in scenarios]
    counted = [("**PASS count**", scenarios)]
    if survey and len(survey) < len(scenarios):
        counted = [
            ("**PASS count, the survey's rows**", survey),
            ("**PASS count, all rows**", scenarios),
        ]
    for label, rows in counted:
        counts = " | ".join(
            f"{sum(passed[(row, client)] for row in rows)}/{len(rows)}" for client in clients
        )
        lines.append(f"| {label} | {counts} |")
    return "\n".join(lines)


def _versions(clients: Sequence[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    names = ["watchdog-sync", "requests", "urllib3", "sseclient-py"]
    if set(clients) - {"ChatClient"}:
        names += ["openai", "anthropic", "httpx", "httpx2", "httpx-sse", "tenacity", "stamina"]
    if GEMINI_CLIENTS & set(clients):
        names.append("google-genai")
    if {c for c in clients if c.startswith("litellm")}:
        names.append("litellm")
    found = []
    for name in names:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} (missing)")
    return ", ".join(found)


def _choose(given: Optional[str], known: Sequence[str], what: str) -> List[str]:
    if not given:
        return list(known)
    chosen = [name.strip() for name in given.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)}; known: {', '.join(known)}")
    return chosen


def _find(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:  # its parent package (google) is missing
        return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, help="calls at once (default 3)")
    parser.add_argument("--scenarios", help="comma-separated scenarios (default: all 23)")
    parser.add_argument("--clients", help="comma-separated clients (default: all)")
    parser.add_argument("--child", nargs=2, metavar=("CLIENT", "BASE_URL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    scenarios = _choose(args.scenarios, list(EXPECTED), "scenario")
    clients = _choose(args.clients, list(CLIENTS), "client")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    wanted = [*PEER_MODULES, *sorted({COLUMN_MODULES[c] for c in clients if c in COLUMN_MODULES})]
    missing = [m for m in wanted if _find(m) is None]
    if missing and set(clients) - {"ChatClient"}:
        print(
            f"fault_matrix: the peer clients need {', '.join(missing)}, which are not installed.\n"
            'Install the benchmark extra: pip install -e ".[bench]"  '
            "(or run ChatClient alone: --clients ChatClient)",
            file=sys.stderr,
        )
        return 2
    print(
        f"Fault matrix: D = {DEADLINE:g} s total, I = {IDLE:g} s idle/read, killed at "
        f"{KILL_AFTER:g} s = HANG; {len(scenarios)} scenarios x {len(clients)} clients, "
        f"{args.jobs} at a time\n{_versions(clients)}",
        flush=True,
    )
    started = time.monotonic()
    runs = run_matrix(scenarios, clients, args.jobs, sys.stdout)
    print(f"\n{table(runs, scenarios, clients)}\n\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
