"""retry_call / @retrying / RetryPolicy: one budget-aware retry owner."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import email.utils
import inspect
import math
import random
import socket
import struct
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import requests

from watchdog_sync import (
    Budget,
    Classification,
    DeadlineExceeded,
    Event,
    HTTPStatusError,
    OperationCancelled,
    RetryBudget,
    RetryExhausted,
    RetryPolicy,
    TransportError,
    add_listener,
    carry_budget,
    current_budget,
    deadline,
    retry_call,
    retrying,
)
from watchdog_sync.testing import FakeClock

pytestmark = pytest.mark.timeout(30)

FAST = RetryPolicy(initial_backoff=0.01, jitter=0.0)


def fake_budget(seconds: float = 1000.0) -> Budget:
    return Budget(seconds, clock=FakeClock())


class Flaky:
    """Raises the given errors in turn, then returns ``'ok'``; counts calls."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def resets(count: int) -> List[BaseException]:
    return [ConnectionResetError(104, "Connection reset by peer") for _ in range(count)]


@pytest.fixture
def events() -> Iterator[List[Event]]:
    seen: List[Event] = []
    unregister = add_listener(seen.append)
    yield seen
    unregister()


# -- RetryPolicy ----------------------------------------------------------------


def test_backoff_sequence_follows_the_formula_with_a_seeded_random_source() -> None:
    policy = RetryPolicy(random=random.Random(42).random)
    reference = random.Random(42)
    expected = [min(1.5 * 2.0**n, 60.0) * (0.75 + 0.5 * reference.random()) for n in range(8)]
    assert [policy.backoff(n) for n in range(8)] == pytest.approx(expected)


def test_backoff_without_jitter_doubles_from_initial_and_is_capped() -> None:
    policy = RetryPolicy(jitter=0.0)
    assert [policy.backoff(n) for n in range(7)] == [1.5, 3.0, 6.0, 12.0, 24.0, 48.0, 60.0]
    assert policy.backoff(10_000) == 60.0  # no overflow for absurd attempt numbers


@pytest.mark.parametrize("draw", [0.0, 0.5, 0.999999])
def test_backoff_jitter_stays_within_plus_minus_jitter(draw: float) -> None:
    wait = RetryPolicy(initial_backoff=2.0, jitter=0.25, random=lambda: draw).backoff(0)
    assert 1.5 <= wait <= 2.5


def test_policy_is_frozen_with_a_readable_repr_and_replace() -> None:
    policy = RetryPolicy(max_attempts=3, retry_budget=RetryBudget())
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_attempts = 9  # type: ignore[misc]
    text = repr(policy)
    assert "max_attempts=3" in text and "initial_backoff=1.5" in text
    assert "RetryBudget(ratio=0.2" in text and " at 0x" not in text
    assert dataclasses.replace(policy, max_attempts=5).max_attempts == 5


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"max_attempts": 0}, ValueError, "max_attempts"),
        ({"max_attempts": True}, TypeError, "max_attempts"),
        ({"max_attempts": 2.5}, TypeError, "max_attempts"),
        ({"initial_backoff": -1}, ValueError, "initial_backoff"),
        ({"initial_backoff": "1"}, TypeError, "initial_backoff"),
        ({"multiplier": 0.5}, ValueError, "multiplier"),
        ({"multiplier": math.nan}, ValueError, "multiplier"),
        ({"max_backoff": math.inf}, ValueError, "max_backoff"),
        ({"jitter": 1.5}, ValueError, "jitter"),
        ({"jitter": -0.1}, ValueError, "jitter"),
        ({"respect_retry_after": "yes"}, TypeError, "respect_retry_after"),
        ({"classify": 3}, TypeError, "classify"),
        ({"retry_budget": object()}, TypeError, "retry_budget"),
        ({"max_retry_after": -5}, ValueError, "max_retry_after"),
        ({"random": 0.5}, TypeError, "random"),
    ],
)
def test_bad_policy_arguments_name_the_parameter(
    kwargs: Dict[str, Any], error: type, name: str
) -> None:
    with pytest.raises(error, match=name):
        RetryPolicy(**kwargs)


def test_bad_call_arguments_give_clear_errors() -> None:
    with pytest.raises(ValueError, match="nested must be 'defer' or 'independent'"):
        retry_call(Flaky(), nested="maybe")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="policy must be a RetryPolicy"):
        retry_call(Flaky(), policy=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="budget must be a Budget"):
        retry_call(Flaky(), budget=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        retry_call(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attempt must be"):
        RetryPolicy().backoff(-1)


# -- the loop -------------------------------------------------------------------


def test_retryable_failures_are_retried_with_the_policys_backoffs() -> None:
    budget = fake_budget()
    flaky = Flaky(*resets(3))
    policy = RetryPolicy(random=random.Random(3).random)
    assert retry_call(flaky, policy=policy, budget=budget) == "ok"
    reference = RetryPolicy(random=random.Random(3).random)
    assert flaky.calls == 4
    assert budget.clock.sleeps == pytest.approx([reference.backoff(n) for n in range(3)])  # type: ignore[attr-defined]


def test_arguments_are_passed_through_to_the_function() -> None:
    def add(a: int, b: int, *, scale: int) -> int:
        return (a + b) * scale

    assert retry_call(add, 1, 2, scale=10, budget=fake_budget()) == 30


@pytest.mark.parametrize(
    "error",
    [
        HTTPStatusError("401 unauthorized", status=401),
        HTTPStatusError("503, but an inner layer gave up", status=503, retryable=False),
        TransportError("reset, inner decision", transport_code="ECONNRESET", retryable=False),
        ValueError("bad input"),
        KeyError("missing"),
        DeadlineExceeded("an inner deadline"),
    ],
    ids=["401", "503-retryable-false", "transport-retryable-false", "value", "key", "deadline"],
)
def test_permanent_errors_make_exactly_one_attempt_and_propagate_unchanged(
    error: Exception,
) -> None:
    flaky = Flaky(error)
    with pytest.raises(type(error)) as info:
        retry_call(flaky, budget=fake_budget())
    assert info.value is error
    assert flaky.calls == 1


def test_exhausted_attempts_raise_retry_exhausted_with_the_last_error() -> None:
    errors = resets(6)
    with pytest.raises(RetryExhausted) as info:
        retry_call(Flaky(*errors), policy=FAST, budget=fake_budget(), stage="locate")
    exc = info.value
    assert exc.reason == "retry_exhausted"
    assert exc.attempts == 6
    assert exc.last_error is errors[-1] and exc.__cause__ is errors[-1]
    assert exc.retryable is True
    assert exc.stage == "locate"


def test_retry_exhausted_message_says_attempts_last_error_and_what_to_change() -> None:
    secret = ConnectionResetError(104, "reset; Authorization: Bearer sk-live-abcdef123456")
    with pytest.raises(RetryExhausted) as info:
        retry_call(
            Flaky(*resets(1), secret),
            policy=dataclasses.replace(FAST, max_attempts=2),
            budget=fake_budget(),
        )
    message = str(info.value)
    assert info.value.attempts == 2
    assert "2 attempts" in message
    assert "ConnectionResetError" in message
    assert "max_attempts" in message
    assert "sk-live" not in message and "abcdef123456" not in message


def test_retry_exhausted_from_an_inner_independent_loop_stays_retryable_for_classify() -> None:
    from watchdog_sync import classify

    with pytest.raises(RetryExhausted) as info:
        retry_call(Flaky(*resets(9)), policy=FAST, budget=fake_budget())
    assert classify(info.value).retryable is True


def test_default_policy_attempts_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WATCHDOG_SYNC_MAX_ATTEMPTS", "2")
    flaky = Flaky(*resets(5))
    with pytest.raises(RetryExhausted):
        retry_call(flaky, budget=fake_budget())
    assert flaky.calls == 2


# -- Retry-After ------------------------------------------------------------------


def _response_error(status: int, headers: Dict[str, str]) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    response.headers.update(headers)
    response._content = b""
    return requests.HTTPError(f"{status} error", response=response)


def _first_wait(error: Exception, policy: RetryPolicy = FAST) -> float:
    budget = fake_budget()
    assert retry_call(Flaky(error), policy=policy, budget=budget) == "ok"
    sleeps: List[float] = budget.clock.sleeps  # type: ignore[attr-defined]
    assert len(sleeps) == 1
    return sleeps[0]


def _http_date(seconds_ahead: float) -> str:
    return email.utils.formatdate(time.time() + seconds_ahead, usegmt=True)


@pytest.mark.parametrize(
    ("make_error", "low", "high"),
    [
        (lambda: HTTPStatusError("503", status=503, retry_after=20.0, retryable=True), 20.0, 25.0),
        (lambda: _response_error(429, {"Retry-After": "7"}), 7.0, 8.75),
        (lambda: _response_error(503, {"retry-after-ms": "2500"}), 2.5, 3.125),
        (lambda: _response_error(429, {"Retry-After": _http_date(10)}), 8.0, 12.5),
    ],
    ids=["HTTPStatusError.retry_after", "seconds", "retry-after-ms", "http-date"],
)
def test_retry_after_is_a_floor_with_jitter_only_upward(
    make_error: Callable[[], Exception], low: float, high: float
) -> None:
    policy = dataclasses.replace(FAST, jitter=0.25)
    assert low <= _first_wait(make_error(), policy) <= high


def test_retry_after_never_goes_below_the_server_value_even_with_low_jitter_draws() -> None:
    policy = dataclasses.replace(FAST, jitter=0.25, random=lambda: 0.0)
    assert (
        _first_wait(HTTPStatusError("429", status=429, retry_after=4.0, retryable=True), policy)
        == 4.0
    )


def test_a_longer_backoff_wins_over_a_short_retry_after() -> None:
    policy = RetryPolicy(initial_backoff=9.0, jitter=0.0)
    assert (
        _first_wait(HTTPStatusError("503", status=503, retry_after=1.0, retryable=True), policy)
        == 9.0
    )


def test_retry_after_is_capped_by_max_retry_after() -> None:
    error = HTTPStatusError("503", status=503, retry_after=500.0, retryable=True)
    assert _first_wait(error) == 60.0
    capped = RetryPolicy(initial_backoff=0.01, jitter=0.0, max_retry_after=5.0)
    assert (
        _first_wait(HTTPStatusError("503", status=503, retry_after=500.0, retryable=True), capped)
        == 5.0
    )


def test_retry_after_is_ignored_when_the_policy_says_so() -> None:
    policy = dataclasses.replace(FAST, respect_retry_after=False)
    assert (
        _first_wait(HTTPStatusError("503", status=503, retry_after=30.0, retryable=True), policy)
        == 0.01
    )


def test_an_overriding_classify_decides_retries_and_retry_after() -> None:
    class Busy(Exception):
        pass

    def busy_is_rate_limited(exc: BaseException) -> Classification:
        return Classification("http", "rate_limited", isinstance(exc, Busy), retry_after=3.0)

    policy = dataclasses.replace(FAST, classify=busy_is_rate_limited)
    assert _first_wait(Busy("slow down"), policy) == 3.0
    reset = ConnectionResetError(104, "reset")
    with pytest.raises(ConnectionResetError):
        retry_call(Flaky(reset), policy=policy, budget=fake_budget())


def test_an_overriding_classify_cannot_retry_what_an_inner_layer_made_permanent() -> None:
    policy = dataclasses.replace(
        FAST, classify=lambda exc: Classification("unknown", "always", True)
    )
    error = TransportError("reset", transport_code="ECONNRESET", retryable=False)
    flaky = Flaky(error)
    with pytest.raises(TransportError):
        retry_call(flaky, policy=policy, budget=fake_budget())
    assert flaky.calls == 1


# -- the deadline -------------------------------------------------------------------


def test_a_backoff_that_would_end_past_the_deadline_fails_now() -> None:
    """No sleeping into a certain failure: 10 s of backoff against 0.5 s left."""
    policy = RetryPolicy(initial_backoff=10.0, jitter=0.0)
    first = ConnectionResetError(104, "reset")
    clock = FakeClock()
    with pytest.raises(DeadlineExceeded) as info:
        retry_call(Flaky(first), policy=policy, budget=Budget(0.5, clock=clock), stage="exec")
    assert clock.sleeps == []  # not 0.5 s (to the deadline), not 10 s
    assert info.value.attempts == 1
    assert info.value.last_error is first
    assert info.value.stage == "exec"
    assert "10.00s" in str(info.value) and "past the deadline" in str(info.value)


def test_a_retry_after_that_would_end_past_the_deadline_fails_now() -> None:
    error = HTTPStatusError("429", status=429, retry_after=30.0, retryable=True)
    clock = FakeClock()
    with pytest.raises(DeadlineExceeded) as info:
        retry_call(Flaky(error), policy=FAST, budget=Budget(2.0, clock=clock))
    assert clock.sleeps == []
    assert info.value.last_error is error


def test_the_deadline_ending_during_an_attempt_reports_attempts_and_last_error() -> None:
    first = ConnectionResetError(104, "reset")

    def attempt() -> str:
        if not calls:
            calls.append(1)
            raise first
        current_budget().sleep(60)  # a blocking call bounded by the budget
        return "never"

    calls: List[int] = []
    with pytest.raises(DeadlineExceeded) as info:
        retry_call(attempt, policy=FAST, budget=fake_budget(5.0))
    assert info.value.attempts == 2
    assert info.value.last_error is first


def test_the_end_of_an_enclosing_scope_is_left_to_that_scope() -> None:
    def blocked() -> None:
        current_budget().sleep(60)

    def call_inside_a_short_scope() -> None:
        with deadline(0.05, stage="sample"):
            retry_call(blocked, policy=FAST, stage="exec")

    with pytest.raises(DeadlineExceeded) as info:
        call_inside_a_short_scope()
    assert info.value.stage == "sample"


def test_an_explicit_budget_inside_a_scope_is_converted_by_retry_call() -> None:
    def blocked() -> None:
        current_budget().sleep(60)

    with deadline(10) as outer, pytest.raises(DeadlineExceeded) as info:
        retry_call(blocked, policy=FAST, budget=outer.child(0.05), stage="exec")
    assert info.value.attempts == 1
    assert info.value.stage == "exec"


def test_cancel_during_backoff_wakes_within_50ms() -> None:
    budget = Budget(10)
    backing_off = threading.Event()
    cancelled_at: List[float] = []
    unregister = add_listener(lambda e: backing_off.set() if e.event == "backoff" else None)

    def cancel_when_backing_off() -> None:
        if backing_off.wait(5):
            time.sleep(0.05)  # the scenario: let the retry loop enter its 5 s sleep
            cancelled_at.append(time.monotonic())
            budget.cancel()

    canceller = threading.Thread(target=cancel_when_backing_off)
    canceller.start()
    policy = RetryPolicy(initial_backoff=5.0, jitter=0.0)
    try:
        with pytest.raises(OperationCancelled) as info:
            retry_call(Flaky(*resets(3)), policy=policy, budget=budget)
        woke_at = time.monotonic()
    finally:
        unregister()
        canceller.join(5)
    assert woke_at - cancelled_at[0] < 0.05
    assert "after 1 attempt" in str(info.value)


# -- one retry owner ------------------------------------------------------------------


def test_a_nested_retry_call_makes_one_attempt_and_the_outer_loop_decides() -> None:
    inner = Flaky(*resets(100))

    def layer() -> str:
        return retry_call(inner, policy=FAST, stage="inner")

    with pytest.raises(RetryExhausted) as info:
        retry_call(layer, policy=dataclasses.replace(FAST, max_attempts=4), budget=fake_budget())
    assert inner.calls == 4
    assert info.value.attempts == 4
    assert isinstance(info.value.last_error, ConnectionResetError)


def test_a_nested_retry_call_re_raises_a_permanent_error_unchanged() -> None:
    error = HTTPStatusError("401", status=401)
    inner = Flaky(error)

    def layer() -> str:
        return retry_call(inner, policy=FAST)

    with pytest.raises(HTTPStatusError) as info:
        retry_call(layer, policy=FAST, budget=fake_budget())
    assert info.value is error
    assert inner.calls == 1


def test_a_thread_started_with_carry_budget_also_defers_to_the_outer_loop() -> None:
    inner = Flaky(*resets(100))

    def layer() -> str:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(carry_budget(retry_call), inner, policy=FAST).result()

    with pytest.raises(RetryExhausted):
        retry_call(layer, policy=dataclasses.replace(FAST, max_attempts=3), budget=fake_budget())
    assert inner.calls == 3


def test_nested_independent_runs_its_own_loop() -> None:
    inner = Flaky(*resets(100))

    def layer() -> str:
        return retry_call(
            inner, policy=dataclasses.replace(FAST, max_attempts=3), nested="independent"
        )

    with pytest.raises(RetryExhausted):
        retry_call(layer, policy=dataclasses.replace(FAST, max_attempts=2), budget=fake_budget())
    assert inner.calls == 6


class ResettingServer:
    """A 127.0.0.1 server that accepts each connection and resets it at once; counts them."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.05)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="resetting-server")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/models"

    def _serve(self) -> None:
        deadline_at = time.monotonic() + 20  # bounded whatever happens
        while not self._stop.is_set() and time.monotonic() < deadline_at:
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            self.connections += 1
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()


@pytest.fixture
def dead_route() -> Iterator[ResettingServer]:
    server = ResettingServer()
    yield server
    server.close()


def _incident_layers(url: str, run_inner: Callable[[Callable[[], Any]], Any]) -> Callable[[], Any]:
    """Three layers as in the incident: exec (6) -> stream (6) -> connect (3)."""
    six = RetryPolicy(max_attempts=6, initial_backoff=0.05)
    three = RetryPolicy(max_attempts=3, initial_backoff=0.05)

    def connect() -> Any:
        with requests.Session() as session:
            return session.get(url, timeout=0.5)

    def stream() -> Any:
        return retry_call(connect, policy=three, stage="stream")

    def exec_layer() -> Any:
        return run_inner(lambda: retry_call(stream, policy=six, stage="exec"))

    return lambda: retry_call(exec_layer, policy=six, stage="locate")


@pytest.mark.parametrize("where", ["same_thread", "carried_thread"])
def test_incident_three_nested_layers_on_a_dead_route_stay_within_6_connects_and_3s(
    dead_route: ResettingServer, where: str
) -> None:
    def in_thread(fn: Callable[[], Any]) -> Any:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(carry_budget(fn)).result()

    run_inner = in_thread if where == "carried_thread" else (lambda fn: fn())
    call = _incident_layers(dead_route.url, run_inner)
    started = time.monotonic()
    with pytest.raises((RetryExhausted, DeadlineExceeded)) as info, deadline(3, stage="sample"):
        call()
    elapsed = time.monotonic() - started
    assert 1 <= dead_route.connections <= 6  # 6 * 6 * 3 = 108 without one retry owner
    assert elapsed <= 3.1
    if isinstance(info.value, RetryExhausted):
        assert isinstance(info.value.last_error, requests.ConnectionError)


# -- RetryBudget through a policy ----------------------------------------------------------


def test_a_refusing_retry_budget_fails_with_the_last_error_and_says_so() -> None:
    shared = RetryBudget(ratio=0.0, min_retries_per_second=0.1, window=10, clock=FakeClock())
    policy = dataclasses.replace(FAST, retry_budget=shared)
    assert retry_call(Flaky(*resets(1)), policy=policy, budget=fake_budget()) == "ok"
    last = ConnectionResetError(104, "reset")
    with pytest.raises(RetryExhausted) as info:
        retry_call(Flaky(last), policy=policy, budget=fake_budget())
    assert info.value.reason == "retry_budget_exhausted"
    assert info.value.last_error is last and info.value.__cause__ is last
    assert info.value.attempts == 1
    assert info.value.retryable is False  # outer loops must not multiply a refused retry
    assert "retry budget was spent" in str(info.value)


def test_a_shared_retry_budget_caps_retries_across_threads() -> None:
    ratio, floor, window = 0.2, 1.0, 10.0
    shared = RetryBudget(
        ratio=ratio, min_retries_per_second=floor, window=window, clock=FakeClock()
    )
    policy = dataclasses.replace(FAST, max_attempts=6, retry_budget=shared)
    lock = threading.Lock()
    attempts = [0]
    refused = [0]

    def failing() -> None:
        with lock:
            attempts[0] += 1
        raise ConnectionResetError(104, "reset")

    def caller() -> None:
        for _ in range(10):
            try:
                retry_call(failing, policy=policy, budget=fake_budget())
            except RetryExhausted as exc:
                if exc.reason == "retry_budget_exhausted":
                    with lock:
                        refused[0] += 1

    threads = [threading.Thread(target=caller) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    first_tries = 20 * 10
    retries = attempts[0] - first_tries
    assert retries <= ratio * attempts[0] + floor * window
    assert attempts[0] < first_tries * 6 / 3  # without the budget: 1200
    assert refused[0] > 0


# -- decorator and events --------------------------------------------------------------------


def test_retrying_keeps_the_signature_and_docstring() -> None:
    def fetch(url: str, *, timeout: Optional[float] = None) -> str:
        """Fetch a URL."""
        return url

    wrapped = retrying(FAST, stage="fetch")(fetch)
    assert wrapped.__name__ == "fetch"
    assert wrapped.__doc__ == "Fetch a URL."
    assert inspect.signature(wrapped) == inspect.signature(fetch)
    assert wrapped("http://x", timeout=1.0) == "http://x"


def test_retrying_retries_and_passes_keywords_named_like_retry_options() -> None:
    flaky = Flaky(*resets(2))

    @retrying(FAST)
    def call(policy: str, budget: int) -> str:
        return f"{flaky()} {policy} {budget}"

    with deadline(100):
        assert call(policy="p", budget=3) == "ok p 3"
    assert flaky.calls == 3


def test_retrying_without_parentheses_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="parentheses"):

        @retrying  # type: ignore[arg-type]
        def call() -> None:
            return None


def test_every_step_emits_a_structured_event(events: List[Event]) -> None:
    error = HTTPStatusError("503", status=503, retryable=True)
    retry_call(Flaky(*resets(1), error), policy=FAST, budget=fake_budget(10), stage="ev")
    mine = [e for e in events if e.stage == "ev"]
    assert (mine[0].event, mine[-1].event) == ("call_start", "call_end")  # the call's boundary
    assert mine[-1].call_id == mine[0].call_id and mine[-1].attempt == 3
    assert mine[-1].reason is None and mine[-1].error_type is None
    assert {e.call_id for e in mine} == {mine[0].call_id}
    mine = mine[1:-1]
    assert [e.event for e in mine] == [
        "attempt_start",
        "attempt_failed",
        "backoff",
        "attempt_start",
        "attempt_failed",
        "backoff",
        "attempt_start",
        "success",
    ]
    assert [e.attempt for e in mine] == [1, 1, 1, 2, 2, 2, 3, 3]
    assert mine[1].transport_code == "ECONNRESET" and mine[1].reason == "transport"
    assert mine[4].status == 503 and mine[4].reason == "unavailable"
    assert mine[2].delay_ms == pytest.approx(10.0)
    assert mine[-1].remaining_ms is not None and mine[-1].remaining_ms <= 10_000
    assert all(e.elapsed_ms is not None for e in mine)


def test_give_up_events_say_why_and_unbounded_calls_have_no_remaining(
    events: List[Event],
) -> None:
    with pytest.raises(HTTPStatusError):
        retry_call(Flaky(HTTPStatusError("401", status=401)), stage="gu")
    mine = [e for e in events if e.stage == "gu"]
    assert [e.event for e in mine] == [
        "call_start",
        "attempt_start",
        "attempt_failed",
        "give_up",
        "call_end",
    ]
    assert mine[-2].reason == "auth"
    assert mine[-1].error_type == "auth"  # a HTTPStatusError's reason, not its class
    assert all(e.remaining_ms is None for e in mine)
