"""One vocabulary for limits: one spelling of "off", one reading of the environment, old spellings warn."""

from __future__ import annotations

import inspect
import math
import threading
import warnings
from typing import Any, Callable, Iterator, List

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FakeClock, FaultGateway

from .internals import default_policy

pytestmark = pytest.mark.timeout(30)

URL = "http://127.0.0.1:1/v1"
MESSAGES = [{"role": "user", "content": "hi"}]
ENV_NAMES = (
    "WATCHDOG_SYNC_TIMEOUT",
    "WATCHDOG_SYNC_IDLE_TIMEOUT",
    "WATCHDOG_SYNC_CONNECT_TIMEOUT",
    "WATCHDOG_SYNC_MAX_ATTEMPTS",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


# -- "off" -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: ws.Budget(-1), "timeout"),
        (lambda: ws.ChatClient("http://127.0.0.1:1/v1", timeout=-1), "timeout"),
        (lambda: ws.ChatClient("http://127.0.0.1:1/v1", timeout=0), "timeout"),
        (lambda: ws.ChatClient("http://127.0.0.1:1/v1", connect_timeout=-1), "connect_timeout"),
        (lambda: ws.ChatClient("http://127.0.0.1:1/v1", connect_timeout=0), "connect_timeout"),
        (lambda: ws.stream_sse("http://127.0.0.1:1/", connect_timeout=-1), "connect_timeout"),
        (lambda: ws.run_sample(int, timeout=-1), "timeout"),
        (lambda: ws.RetryPolicy(initial_backoff=-1), "initial_backoff"),
    ],
)
def test_budget_limits_reject_zero_or_negatives(build: Callable[[], Any], name: str) -> None:
    """A budget's limit is never 'off' by being <= 0: a ValueError names it."""
    with pytest.raises(ValueError, match=f"^{name} must be"):
        build()


@pytest.mark.parametrize("value", [0, -1, -0.5, None, float("inf")])
def test_idle_limits_at_or_below_zero_are_off(value: Any) -> None:
    """The seed's rule: idle_timeout / first_event_timeout <= 0 (or None, inf) is off everywhere."""
    client = ws.ChatClient("http://127.0.0.1:1/v1", idle_timeout=value, first_event_timeout=0)
    with client:
        assert client._settings.idle_timeout is None
        assert client._settings.first_event_timeout is None
    items: List[int] = []
    with ws.guard_stream(iter([1, 2]), idle_timeout=value, first_item_timeout=-1) as stream:
        items.extend(stream)
    assert items == [1, 2]


def test_new_spellings_of_off_raise_no_warning(fault_gateway: FaultGateway) -> None:
    """0 for an idle limit and inf for any limit are 'off' everywhere, without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ws.ChatClient(
            fault_gateway.base_url("ok"),
            model="m",
            first_event_timeout=0,
            connect_timeout=math.inf,
            timeout=math.inf,
        ) as client:
            assert client._settings.first_event_timeout is None
            assert client._settings.connect_timeout is None
            assert client._settings.timeout is None
            assert client.complete(MESSAGES, timeout=math.inf)["choices"]
            with client.stream(MESSAGES, first_event_timeout=0) as stream:
                assert "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in stream)
        events = ws.stream_sse(
            fault_gateway.base_url("ok") + "/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
            first_event_timeout=0,
            connect_timeout=math.inf,
        )
        with events:
            assert any(event.data for event in events)
        with ws.guard_stream(iter([1]), idle_timeout=0, first_item_timeout=0) as guarded:
            assert list(guarded) == [1]


# -- old spellings: they still work, with a DeprecationWarning pointing at the caller ----


def _blocked_source(release: threading.Event) -> Iterator[int]:
    release.wait(10)  # a silent source; on_timeout releases it
    yield from ()


def test_guard_stream_first_item_timeout_none_still_means_the_idle_limit() -> None:
    """first_item_timeout=None warns, and the first item is still bounded by idle_timeout."""
    release = threading.Event()
    with pytest.warns(DeprecationWarning, match="first_item_timeout=None") as caught:
        stream = ws.guard_stream(
            _blocked_source(release),
            idle_timeout=0.2,
            first_item_timeout=None,
            on_timeout=release.set,
        )
    assert caught[0].filename == __file__
    with stream, pytest.raises(ws.StreamIdleTimeout) as info:
        next(stream)
    assert info.value.idle_timeout == 0.2
    assert "idle_timeout=" in str(info.value)


def test_stream_sse_first_event_timeout_none_still_means_the_idle_limit(
    fault_gateway: FaultGateway,
) -> None:
    """stream_sse(first_event_timeout=None) warns; a silent stream still ends after idle_timeout."""
    url = fault_gateway.base_url("silent_after_200") + "/chat/completions"
    with pytest.warns(DeprecationWarning, match="first_event_timeout=None") as caught:
        events = ws.stream_sse(
            url,
            json={"messages": MESSAGES, "stream": True},
            idle_timeout=0.3,
            first_event_timeout=None,
        )
    assert caught[0].filename == __file__
    with events, pytest.raises(ws.StreamIdleTimeout) as info:
        next(events)
    assert info.value.idle_timeout == 0.3


def test_stream_sse_connect_timeout_none_still_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """stream_sse(connect_timeout=None) warns and still means WATCHDOG_SYNC_CONNECT_TIMEOUT."""
    monkeypatch.setenv("WATCHDOG_SYNC_CONNECT_TIMEOUT", "soon")
    with (
        pytest.warns(DeprecationWarning, match="connect_timeout=None"),
        pytest.raises(ValueError, match="WATCHDOG_SYNC_CONNECT_TIMEOUT='soon'"),
    ):
        ws.stream_sse(URL, connect_timeout=None)


def test_chat_client_first_event_timeout_none_still_means_the_idle_limit() -> None:
    """ChatClient(first_event_timeout=None) warns; the first-event limit is idle_timeout."""
    with pytest.warns(DeprecationWarning, match="first_event_timeout=None") as caught:
        client = ws.ChatClient(URL, idle_timeout=7, first_event_timeout=None)
    assert caught[0].filename == __file__
    with client:
        assert client._settings.first_event_timeout == 7.0


def test_a_call_timeout_none_still_means_the_clients_timeout(fault_gateway: FaultGateway) -> None:
    """complete(timeout=None) and stream(first_event_timeout=None) warn and use the client's."""
    with ws.ChatClient(fault_gateway.base_url("ok"), model="m", timeout=5) as client:
        with pytest.warns(DeprecationWarning, match="timeout=None on a call") as caught:
            assert client.complete(MESSAGES, timeout=None)["choices"]
        assert caught[0].filename == __file__
        with pytest.warns(DeprecationWarning, match="first_event_timeout=None on a call"):
            stream = client.stream(MESSAGES, first_event_timeout=None)
        with stream:
            assert list(stream)


def test_retry_policy_positional_arguments_still_work_with_a_warning() -> None:
    """RetryPolicy(3, 0.5) warns and means max_attempts=3, initial_backoff=0.5."""
    with pytest.warns(DeprecationWarning, match="keyword arguments only") as caught:
        policy = ws.RetryPolicy(3, 0.5)
    assert caught[0].filename == __file__
    assert (policy.max_attempts, policy.initial_backoff) == (3, 0.5)
    assert policy == ws.RetryPolicy(max_attempts=3, initial_backoff=0.5)
    with pytest.raises(TypeError, match="keyword arguments only"):
        ws.RetryPolicy(*range(1, 10))  # type: ignore[misc]


def test_retry_policy_is_built_from_its_fields_and_stays_frozen() -> None:
    """Every argument is validated when the policy is built; afterwards nothing can change it."""
    policy = ws.RetryPolicy(max_attempts=2)
    with pytest.raises(AttributeError):
        policy.max_attempts = 5  # type: ignore[misc]
    parameters = inspect.signature(ws.RetryPolicy).parameters.values()
    assert all(parameter.kind is inspect.Parameter.KEYWORD_ONLY for parameter in parameters)
    assert inspect.signature(ws.RetryPolicy).parameters["max_attempts"].default == 6
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        ws.RetryPolicy(max_attempts=0)


# -- the environment -----------------------------------------------------------------------


def test_max_attempts_has_one_default_for_retry_call_and_chat_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """WATCHDOG_SYNC_MAX_ATTEMPTS (default 6) sets retry_call's and ChatClient's attempts alike."""
    with ws.ChatClient(URL) as client:
        assert client._settings.retry.max_attempts == default_policy().max_attempts == 6
    monkeypatch.setenv("WATCHDOG_SYNC_MAX_ATTEMPTS", "2")
    with ws.ChatClient(URL) as client:
        assert client._settings.retry.max_attempts == default_policy().max_attempts == 2
    calls: List[int] = []

    def flaky() -> None:
        calls.append(1)
        raise ws.TransportError("reset", transport_code="ECONNRESET")

    with pytest.raises(ws.RetryExhausted):
        ws.retry_call(flaky, budget=ws.Budget(60, clock=FakeClock()))
    assert len(calls) == 2


def test_chat_client_reads_the_environment_once_and_stream_sse_at_each_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client keeps the environment it was built with; each stream_sse call reads it again."""
    monkeypatch.setenv("WATCHDOG_SYNC_IDLE_TIMEOUT", "7")
    client = ws.ChatClient(URL)
    monkeypatch.setenv("WATCHDOG_SYNC_IDLE_TIMEOUT", "soon")
    with client:
        assert client._settings.idle_timeout == 7.0
    with pytest.raises(ValueError, match="WATCHDOG_SYNC_IDLE_TIMEOUT='soon'"):
        ws.stream_sse(URL)


def test_signatures_show_where_each_default_comes_from() -> None:
    """help() shows the environment variable and default, or 'idle_timeout', or 'the client's'."""

    def defaults(fn: Callable[..., Any]) -> dict:
        return {n: repr(p.default) for n, p in inspect.signature(fn).parameters.items()}

    sse = defaults(ws.stream_sse)
    assert sse["idle_timeout"] == "$WATCHDOG_SYNC_IDLE_TIMEOUT or 120"
    assert sse["connect_timeout"] == "$WATCHDOG_SYNC_CONNECT_TIMEOUT or 10"
    assert sse["first_event_timeout"] == "idle_timeout"
    assert defaults(ws.guard_stream)["first_item_timeout"] == "idle_timeout"
    assert defaults(ws.ChatClient)["first_event_timeout"] == "idle_timeout"
    assert defaults(ws.ChatClient.stream)["timeout"] == "the client's"
