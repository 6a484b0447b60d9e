"""Soak: thousands of ChatClient streams from many threads against a misbehaving gateway.

Usage: python benchmarks/soak.py [--streams 2000] [--threads 50] [--seed 1] [--warmup 300]
                                 [--pace llm|burst]

A FaultGateway runs in a child process (so this process's threads, file descriptors and
memory are the client's alone) with one route per call. A seeded, shuffled plan of calls,
about a third of them faulty (silence, stall, resets, 429, 500, drip, an oversized event),
is spread over the threads. Each call is one ``ChatClient.stream()`` read to its end.

Checked, and printed: every call ended with success or with the error its scenario
documents (EXPECTED below); no call overran its timeout by more than ``--max-overrun``;
threads and file descriptors are back at their baseline afterwards; resident memory grew
by less than ``--max-rss-growth-mib`` after a warm-up batch; ``threading.excepthook`` never
fired. Exits with status 1 if any check failed.

The pace of the healthy (``ok``) streams: ``llm`` (the default) sends 20 chunks 50 ms
apart, a one-second answer as gateways stream one; ``burst`` sends 5 chunks 20 ms apart,
about three times as many calls per second, which keeps this process's GIL busy all the time
on 2 cores. Beside the calls, a monitor thread sleeps 10 ms at a time and records how late it
wakes (the scheduling delay any thread of this process sees at that load, the floor under
the calls' overrun) and the thread count. The report gives the delay with the process's CPU
use. Everything runs on 127.0.0.1, bounded in count and time, and stops by itself.

The oversized event: ChatClient's cap on one event is the fixed 8 MiB of ``stream_sse``
(the client has no ``max_event_bytes`` setting), so the ``huge_line`` scenario sends a
line of 8.25 MiB: the smallest line that must trip the cap with room to spare. The client
reads at most 8 MiB plus one 64 KiB read of it before it stops with ``event_too_large``.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import dataclasses
import gc
import json
import os
import random
import select
import subprocess
import sys
import threading
import time
import uuid
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Tuple

from watchdog_sync import (
    ChatClient,
    DeadlineExceeded,
    Event,
    RetryExhausted,
    RetryPolicy,
    Session,
    WatchdogError,
    add_listener,
)
from watchdog_sync.testing import WATCHDOG_THREAD_NAME, FaultGateway

MIB = 1024 * 1024
IDLE_TIMEOUT = 0.3
TIMEOUT = 1.5
CONNECT_TIMEOUT = 1.0
RETRY_AFTER = 0.1  # the 429 scenarios' Retry-After, seconds
HUGE_LINE_BYTES = 8 * MIB + 256 * 1024  # just past ChatClient's fixed 8 MiB event cap
GATEWAY_TEXT = "Hello from the watchdog_sync fault gateway."
MESSAGES = [{"role": "user", "content": "soak"}]
SETTLE_SECONDS = 2.0
MONITOR_SLEEP = 0.01  # the monitor thread's sleep, seconds
# The healthy streams' pace: (chunks, seconds between them)
PACES: Dict[str, Tuple[int, float]] = {"llm": (20, 0.05), "burst": (5, 0.02)}
_CHILD_FLAG = "--gateway-child"
_CHILD_SECONDS = 30.0  # bound on each exchange with the gateway process

# scenario -> (gateway scenario, its options, share of all calls)
SCENARIOS: Dict[str, Tuple[str, Dict[str, Any], float]] = {
    "ok": ("ok", {}, 0.0),  # the rest; chunks and interval: PACES
    "silent_after_200": ("silent_after_200", {}, 1 / 36),
    "silent_then_ok": ("silent_then_ok", {}, 1 / 36),
    "stall_after_chunks": ("stall_after_chunks", {"chunks": 2}, 1 / 36),
    "reset_before_headers": ("reset_before_headers", {}, 1 / 36),
    "reset_then_ok": ("reset_then_ok", {}, 1 / 36),
    "reset_mid_stream": ("reset_mid_stream", {"chunks": 2}, 1 / 36),
    "http429": ("http429", {"retry_after": RETRY_AFTER}, 1 / 36),
    "http429_then_ok": ("http429_then_ok", {"retry_after": RETRY_AFTER}, 1 / 36),
    "http500": ("http500", {}, 1 / 36),
    "http500_then_ok": ("http500_then_ok", {}, 1 / 36),
    "slow_drip": ("slow_drip", {"interval": 0.1}, 1 / 36),
    "huge_line": ("huge_line", {"size": HUGE_LINE_BYTES, "piece": MIB}, 1 / 72),
}


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    """The fields of an error that the checks read. The error itself is not kept: its
    traceback would keep every frame of the call, and the call's stream, alive."""

    kind: str  # the class name
    reason: str
    message: str
    chunks_received: Optional[int]
    transport_code: Optional[str]
    status: Optional[int]
    attempts: Optional[int]
    last: Optional[ErrorInfo]  # RetryExhausted / DeadlineExceeded: the last attempt's error

    @classmethod
    def of(cls, error: BaseException) -> ErrorInfo:
        last = getattr(error, "last_error", None)
        return cls(
            kind=type(error).__name__,
            reason=str(getattr(error, "reason", "")),
            message=str(error)[:200],
            chunks_received=getattr(error, "chunks_received", None),
            transport_code=getattr(error, "transport_code", None),
            status=getattr(error, "status", None),
            attempts=getattr(error, "attempts", None),
            last=None if last is None else cls.of(last),
        )

    def is_a(self, kind: str, **fields: Any) -> bool:
        """This is a ``kind`` whose fields have the given values."""
        return self.kind == kind and all(getattr(self, k) == v for k, v in fields.items())


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one call ended, as the caller saw it."""

    scenario: str
    error: Optional[ErrorInfo]  # None: the stream ended normally
    failures: Tuple[str, ...]  # the reason of each failed attempt (the call's events)
    attempts: int
    chunks: int  # chunk dicts the caller received
    finish_reason: Optional[str]
    text: str
    elapsed: float  # from calling stream() to the stream closed
    timeout: float

    @property
    def overrun(self) -> float:
        return self.elapsed - self.timeout

    @property
    def label(self) -> str:
        """``success (N attempts)`` or the error's class (``<-`` the last attempt's error)."""
        error = self.error
        if error is None:
            return f"success ({self.attempts} attempt{'s' if self.attempts != 1 else ''})"
        name = error.kind
        if error.kind == "StreamProtocolError":
            name += f"({error.reason})"
        return f"{name}<-{error.last.kind}" if error.last is not None else name


# Under full load a first chunk can come later than the idle limit: that attempt fails
# with this reason and is retried (the watchdog doing its job). Any scenario may show it.
LATE_FIRST_CHUNK = "stream_idle_timeout"


def _whole_answer(o: Outcome) -> bool:
    return o.error is None and o.finish_reason == "stop" and o.text == GATEWAY_TEXT


def _success(o: Outcome) -> bool:
    return _whole_answer(o) and o.attempts == len(o.failures) + 1


def _success_after_fault(o: Outcome) -> bool:
    return _success(o) and o.attempts >= 2


def _retry_after_honoured(o: Outcome) -> bool:
    waited = "rate_limited" not in o.failures or o.elapsed >= RETRY_AFTER
    return _success_after_fault(o) and waited


def _exhausted(kind: str, **fields: Any) -> Callable[[Outcome], bool]:
    """Every attempt failed before a chunk: RetryExhausted after 3 attempts, or
    DeadlineExceeded if the deadline came first; the last failure a ``kind``."""

    def check(o: Outcome) -> bool:
        error = o.error
        if o.chunks or error is None or error.last is None:
            return False
        if not (error.is_a("RetryExhausted", attempts=3) or error.is_a("DeadlineExceeded")):
            return False
        late = error.last.is_a("StreamIdleTimeout", chunks_received=0)
        return error.last.is_a(kind, **fields) or late

    return check


def _stalled(o: Outcome) -> bool:
    error = o.error
    return (
        error is not None and error.is_a("StreamIdleTimeout", chunks_received=2) and o.chunks == 2
    )


def _reset_mid_stream(o: Outcome) -> bool:
    error = o.error
    reset = error is not None and error.is_a("TransportError", transport_code="ECONNRESET")
    return reset and o.chunks == 2


def _dripped_to_deadline(o: Outcome) -> bool:
    return o.error is not None and o.error.is_a("DeadlineExceeded") and o.chunks > 0


def _too_large(o: Outcome) -> bool:
    error = o.error
    if error is None or o.chunks != 1:
        return False
    return error.is_a("StreamProtocolError", reason="event_too_large") or error.is_a(
        "StreamIdleTimeout", chunks_received=1
    )


_EXHAUSTED = "RetryExhausted after 3 attempts (DeadlineExceeded if the deadline comes first)"

# scenario -> (the reason its fault gives a failed attempt, what the caller must see, check)
EXPECTED: Dict[str, Tuple[Optional[str], str, Callable[[Outcome], bool]]] = {
    "ok": (None, "success, the whole text, finish_reason stop", _success),
    "silent_after_200": (
        "stream_idle_timeout",
        f"{_EXHAUSTED}; last_error StreamIdleTimeout with 0 chunks",
        _exhausted("StreamIdleTimeout", chunks_received=0),
    ),
    "silent_then_ok": ("stream_idle_timeout", "success after 2 attempts", _success_after_fault),
    "stall_after_chunks": (
        "stream_idle_timeout",
        "StreamIdleTimeout while iterating, chunks_received 2",
        _stalled,
    ),
    "reset_before_headers": (
        "transport",
        f"{_EXHAUSTED}; last_error TransportError ECONNRESET",
        _exhausted("TransportError", transport_code="ECONNRESET"),
    ),
    "reset_then_ok": ("transport", "success after 2 attempts", _success_after_fault),
    "reset_mid_stream": (
        "transport",
        "TransportError ECONNRESET while iterating, after 2 chunks",
        _reset_mid_stream,
    ),
    "http429": (
        "rate_limited",
        f"{_EXHAUSTED}; last_error HTTPStatusError 429",
        _exhausted("HTTPStatusError", status=429),
    ),
    "http429_then_ok": (
        "rate_limited",
        f"success after 2 attempts, not before the Retry-After ({RETRY_AFTER} s)",
        _retry_after_honoured,
    ),
    "http500": (
        "server_error",
        f"{_EXHAUSTED}; last_error HTTPStatusError 500",
        _exhausted("HTTPStatusError", status=500),
    ),
    "http500_then_ok": ("server_error", "success after 2 attempts", _success_after_fault),
    "slow_drip": (
        "deadline_exceeded",
        "DeadlineExceeded at the call's timeout, after chunks",
        _dripped_to_deadline,
    ),
    "huge_line": (
        "event_too_large",
        "StreamProtocolError event_too_large after 1 chunk, or StreamIdleTimeout after 1 "
        "chunk when the 8 MiB line takes longer than idle_timeout to arrive",
        _too_large,
    ),
}


def check(outcome: Outcome) -> bool:
    """The outcome is its scenario's, and every failed attempt failed for the scenario's
    reason or with a late first chunk."""
    fault, _, final = EXPECTED[outcome.scenario]
    allowed = {fault, LATE_FIRST_CHUNK}
    return final(outcome) and all(reason in allowed for reason in outcome.failures)


def gateway_route(name: str, pace: str) -> Tuple[str, Dict[str, Any]]:
    """The gateway scenario and options of one call of ``name``."""
    scenario, options, _ = SCENARIOS[name]
    if name == "ok":
        chunks, interval = PACES[pace]
        options = {**options, "chunks": chunks, "interval": interval}
    return scenario, options


def make_plan(streams: int, seed: int) -> List[str]:
    """``streams`` scenario names in each scenario's share (rounded), shuffled with ``seed``."""
    plan: List[str] = []
    for name, (_, _, share) in SCENARIOS.items():
        if name != "ok":
            plan += [name] * max(1, round(streams * share))
    plan += ["ok"] * max(0, streams - len(plan))
    random.Random(seed).shuffle(plan)
    return plan[:streams]


def retry_policy(rng: random.Random) -> RetryPolicy:
    """Three attempts, 50 ms backoff doubling up to 200 ms, Retry-After capped at 0.5 s."""
    return RetryPolicy(
        max_attempts=3,
        initial_backoff=0.05,
        multiplier=2.0,
        max_backoff=0.2,
        jitter=0.25,
        max_retry_after=0.5,
        random=rng.random,
    )


class FailureLog:
    """The reasons of failed attempts, per request id, from the library's events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: Dict[str, List[str]] = collections.defaultdict(list)

    def __call__(self, event: Event) -> None:
        if event.event == "attempt_failed" and event.request_id is not None:
            with self._lock:
                self._reasons[event.request_id].append(event.reason or "?")

    def pop(self, request_id: str) -> Tuple[str, ...]:
        with self._lock:
            return tuple(self._reasons.pop(request_id, ()))


def one_call(
    base_url: str, scenario: str, session: Session, policy: RetryPolicy, failures: FailureLog
) -> Outcome:
    """One ChatClient stream read to its end; never raises a WatchdogError."""
    request_id = uuid.uuid4().hex
    client = ChatClient(
        base_url,
        model="soak",
        timeout=TIMEOUT,
        idle_timeout=IDLE_TIMEOUT,
        connect_timeout=CONNECT_TIMEOUT,
        retry=policy,
        session=session,
        headers={"X-Request-ID": request_id},
    )
    chunks = attempts = 0
    finish_reason: Optional[str] = None
    text = ""
    error: Optional[ErrorInfo] = None
    started = time.monotonic()
    try:
        with client.stream(MESSAGES) as stream:
            try:
                for _ in stream:
                    chunks += 1
            finally:
                attempts, finish_reason, text = stream.attempts, stream.finish_reason, stream.text
    except (RetryExhausted, DeadlineExceeded) as exc:
        error, attempts = ErrorInfo.of(exc), attempts or exc.attempts
    except WatchdogError as exc:
        error, attempts = ErrorInfo.of(exc), attempts or (exc.attempt or 1)
    elapsed = time.monotonic() - started
    client.close()
    return Outcome(
        scenario,
        error,
        failures.pop(request_id),
        attempts,
        chunks,
        finish_reason,
        text,
        elapsed,
        TIMEOUT,
    )


# -- the gateway, in a child process ------------------------------------------------------


class GatewayProcess:
    """A FaultGateway in a child process; the routes are registered once, up front."""

    def __init__(self, routes: Sequence[Tuple[str, Dict[str, Any]]], max_connections: int):
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), _CHILD_FLAG],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            self._send({"routes": list(routes), "max_connections": max_connections})
            self.urls: List[str] = self._receive()["urls"]
        except BaseException:
            self._kill()
            raise

    def _send(self, message: Dict[str, Any]) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def _receive(self) -> Dict[str, Any]:
        stdout = self._proc.stdout
        assert stdout is not None
        line = _read_line(stdout, _CHILD_SECONDS)
        if not line:
            raise RuntimeError(f"the gateway process ended early (exit {self._proc.poll()})")
        result: Dict[str, Any] = json.loads(line)
        return result

    def stop(self) -> Dict[str, Any]:
        """Stop the gateway; returns what it saw: requests, and requests still open."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()  # end of input: the child stops its gateway and reports
        try:
            return self._receive()
        finally:
            self._kill()

    def _kill(self) -> None:
        proc = self._proc
        try:
            proc.wait(_CHILD_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(_CHILD_SECONDS)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _read_line(stream: IO[str], timeout: float) -> str:
    if not select.select([stream], [], [], timeout)[0]:
        raise RuntimeError(f"the gateway process did not answer within {timeout:.0f}s")
    return stream.readline()


def _gateway_child() -> None:
    """Child side: register the routes, print their URLs, serve until stdin closes."""
    config = json.loads(sys.stdin.readline())
    with FaultGateway(max_connections=config["max_connections"]) as gateway:
        urls = [gateway.base_url(name, **options) for name, options in config["routes"]]
        print(json.dumps({"urls": urls}), flush=True)
        sys.stdin.read()  # until the parent closes our stdin (or dies)
        # The parent's clients are all closed: each held request ends within a 50 ms tick.
        give_up = time.monotonic() + 1.0
        while True:
            seen = gateway.requests_seen()
            still_open = [f"{r.key}#{r.attempt}" for r in seen if r.ended_at is None]
            if not still_open or time.monotonic() > give_up:
                break
            time.sleep(0.05)
    print(json.dumps({"requests": len(seen), "open_at_stop": still_open}), flush=True)


# -- the run -------------------------------------------------------------------------------


def _threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name != WATCHDOG_THREAD_NAME]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


_M_MMAP_THRESHOLD = -3  # glibc's mallopt() parameter


def pin_mmap_threshold(nbytes: int = MIB) -> bool:
    """Make glibc serve every allocation of ``nbytes`` or more with its own mmap (so it goes
    back to the OS when freed), for the rest of the process; False where that is not glibc.

    By default glibc raises that threshold after the first such buffer is freed (an 8 MiB
    event buffer, here), and later large buffers then live in per-thread arenas that keep
    their memory: RSS would show the high-water mark of the event buffers that were alive
    at the same time, not what is still alive.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, nbytes))
    except (OSError, AttributeError):
        return False


def _rss_mib() -> float:
    """VmRSS of this process in MiB, after collecting garbage."""
    gc.collect()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _settle(threads: int, fds: int) -> Tuple[int, int]:
    """Wait (at most SETTLE_SECONDS) for threads and fds to come back to the given counts."""
    give_up = time.monotonic() + SETTLE_SECONDS
    while True:
        gc.collect()  # idle pooled connections of closed sessions close when collected
        now_threads, now_fds = len(_threads()), _fds()
        if (now_threads <= threads and now_fds <= fds) or time.monotonic() > give_up:
            return now_threads, now_fds
        time.sleep(0.02)


def _run_batch(
    calls: Sequence[Tuple[str, str]],
    threads: int,
    seed: int,
    deadline: float,
    failures: FailureLog,
) -> List[Outcome]:
    """Run ``(scenario, base_url)`` calls from ``threads`` threads; each takes the next call."""
    outcomes: List[Outcome] = []
    lock = threading.Lock()
    pending = iter(calls)

    def worker(index: int) -> None:
        policy = retry_policy(random.Random(seed * 1000 + index))
        with Session() as session:
            while time.monotonic() < deadline:
                with lock:
                    call = next(pending, None)
                if call is None:
                    return
                outcome = one_call(call[1], call[0], session, policy, failures)
                with lock:
                    outcomes.append(outcome)

    workers = [threading.Thread(target=worker, args=(i,), name=f"soak-{i}") for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(max(0.0, deadline - time.monotonic()) + 10.0)
    return outcomes


class RunMonitor:
    """One thread that sleeps MONITOR_SLEEP at a time and, on each wake, records how late it
    woke (the process's scheduling delay) and the number of threads (for the peak)."""

    def __init__(self) -> None:
        self.late: List[float] = []
        self.peak_threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-monitor")

    def _run(self) -> None:
        while True:
            before = time.monotonic()
            if self._stop.wait(MONITOR_SLEEP):
                return
            self.late.append(time.monotonic() - before - MONITOR_SLEEP)
            self.peak_threads = max(self.peak_threads, len(_threads()))

    def __enter__(self) -> RunMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5.0)


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


@dataclasses.dataclass
class Report:
    """What a soak run measured, and what went wrong (``problems`` empty: all checks passed)."""

    streams: int
    threads: int
    seed: int
    pace: str
    seconds: float
    cpu_seconds: float  # this process's CPU time during the measured run
    monitor_late: List[float]  # sorted: how late the monitor thread woke, seconds
    outcomes: List[Outcome]
    threads_before: int
    threads_peak: int
    threads_after: int
    fds_before: int
    fds_after: int
    rss_before_mib: float
    rss_after_mib: float
    excepthook_calls: int
    gateway: Dict[str, Any]
    problems: List[str]

    @property
    def rss_growth_mib(self) -> float:
        return self.rss_after_mib - self.rss_before_mib

    def overruns(self) -> List[float]:
        return sorted(o.overrun for o in self.outcomes)

    def deadline_overruns(self) -> List[float]:
        """Overruns of the calls that ended at their deadline (DeadlineExceeded)."""
        ended = [o for o in self.outcomes if o.error and o.error.is_a("DeadlineExceeded")]
        return sorted(o.overrun for o in ended)

    def late_first_chunks(self) -> int:
        """Attempts that failed with a late first chunk in scenarios that are not silent."""
        return sum(
            o.failures.count(LATE_FIRST_CHUNK)
            for o in self.outcomes
            if EXPECTED[o.scenario][0] != LATE_FIRST_CHUNK
        )

    def by_scenario(self) -> Dict[str, collections.Counter[str]]:
        table: Dict[str, collections.Counter[str]] = {
            name: collections.Counter() for name in SCENARIOS
        }
        for outcome in self.outcomes:
            table[outcome.scenario][outcome.label] += 1
        return table


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted ``values`` (nan when empty)."""
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(fraction * len(values)) - 1))]


def run_soak(
    streams: int = 2000,
    threads: int = 50,
    *,
    seed: int = 1,
    warmup: int = 300,
    max_overrun: float = 0.1,
    max_rss_growth_mib: float = 20.0,
    run_seconds: float = 600.0,
    pin_malloc: bool = True,
    pace: str = "llm",
) -> Report:
    """Run the soak; ``report.problems`` lists every failed check (empty when all passed).

    ``pin_malloc`` pins glibc's mmap threshold first (see :func:`pin_mmap_threshold`),
    for the rest of the process.
    """
    if pace not in PACES:
        raise ValueError(f"pace must be one of {sorted(PACES)}, got {pace!r}")
    if pin_malloc:
        pin_mmap_threshold()
    threads_before, fds_before = len(_threads()), _fds()
    warm = make_plan(warmup, seed + 1)
    plan = make_plan(streams, seed)
    routes = [gateway_route(name, pace) for name in warm + plan]
    hook_calls: List[threading.ExceptHookArgs] = []
    previous_hook = threading.excepthook
    threading.excepthook = hook_calls.append
    failures = FailureLog()
    unregister = add_listener(failures)
    gateway = GatewayProcess(routes, max_connections=4 * threads)
    try:
        deadline = time.monotonic() + run_seconds
        urls = gateway.urls
        _run_batch(list(zip(warm, urls)), threads, seed + 1, deadline, failures)
        _settle(threads_before, fds_before + 2)
        rss_before = _rss_mib()
        started, cpu_started = time.monotonic(), _cpu_seconds()
        try:
            with RunMonitor() as monitor:
                calls = list(zip(plan, urls[len(warm) :]))
                outcomes = _run_batch(calls, threads, seed, deadline, failures)
        finally:
            seconds = time.monotonic() - started
            cpu_seconds = _cpu_seconds() - cpu_started
        # Every client is closed: let the last reader threads end (each may still hold an
        # event buffer) before reading RSS. The gateway process's two pipes are still open.
        _settle(threads_before, fds_before + 2)
        rss_after = _rss_mib()
    finally:
        threading.excepthook = previous_hook
        unregister()
        seen = gateway.stop()
    threads_after, fds_after = _settle(threads_before, fds_before)
    report = Report(
        streams=streams,
        threads=threads,
        seed=seed,
        pace=pace,
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        monitor_late=sorted(monitor.late),
        outcomes=outcomes,
        threads_before=threads_before,
        threads_peak=monitor.peak_threads,
        threads_after=threads_after,
        fds_before=fds_before,
        fds_after=fds_after,
        rss_before_mib=rss_before,
        rss_after_mib=rss_after,
        excepthook_calls=len(hook_calls),
        gateway=seen,
        problems=[],
    )
    report.problems = _problems(report, max_overrun, max_rss_growth_mib)
    return report


def _problems(report: Report, max_overrun: float, max_rss_growth_mib: float) -> List[str]:
    problems: List[str] = []
    if len(report.outcomes) != report.streams:
        problems.append(f"{len(report.outcomes)} of {report.streams} calls ran (time ran out)")
    for outcome in report.outcomes:
        if not check(outcome):
            problems.append(
                f"{outcome.scenario}: got {outcome.label} ({outcome.error}, {outcome.chunks} "
                f"chunks, failed attempts {outcome.failures}, {outcome.elapsed:.3f}s); "
                f"expected {EXPECTED[outcome.scenario][1]}"
            )
        if outcome.overrun > max_overrun:
            problems.append(
                f"{outcome.scenario}: took {outcome.elapsed:.3f}s, {outcome.overrun:.3f}s past "
                f"its {outcome.timeout}s timeout (allowed: {max_overrun}s)"
            )
    if report.threads_after > report.threads_before:
        problems.append(f"threads: {report.threads_before} before, {report.threads_after} after")
    if report.fds_after > report.fds_before:
        problems.append(f"file descriptors: {report.fds_before} before, {report.fds_after} after")
    if report.rss_growth_mib >= max_rss_growth_mib:
        problems.append(
            f"RSS grew {report.rss_growth_mib:.1f} MiB (allowed: < {max_rss_growth_mib} MiB)"
        )
    if report.excepthook_calls:
        problems.append(f"threading.excepthook fired {report.excepthook_calls} times")
    if report.gateway.get("open_at_stop"):
        problems.append(f"requests still open at the gateway: {report.gateway['open_at_stop']}")
    return problems


def format_report(report: Report) -> str:
    """The figures, as printed by the command."""
    chunks, interval = PACES[report.pace]
    lines = [
        f"{report.streams} ChatClient streams from {report.threads} threads, seed {report.seed}: "
        f"{report.seconds:.1f}s ({report.streams / report.seconds:.0f} streams/s); "
        f"idle_timeout {IDLE_TIMEOUT}s, timeout {TIMEOUT}s, 3 attempts; pace {report.pace} "
        f"(ok: {chunks} chunks {interval * 1000:.0f} ms apart)",
        "",
        "| scenario | calls | outcomes | expected |",
        "| --- | --- | --- | --- |",
    ]
    for name, counter in report.by_scenario().items():
        outcomes = ", ".join(f"{label} x{count}" for label, count in counter.most_common())
        lines.append(f"| {name} | {sum(counter.values())} | {outcomes} | {EXPECTED[name][1]} |")
    overruns, late, woke = report.overruns(), report.deadline_overruns(), report.monitor_late
    lines += [
        "",
        f"overrun past the timeout, all calls: max {overruns[-1] * 1000:+.1f} ms"
        if overruns
        else "no calls",
        f"overrun of the {len(late)} calls that ended at their deadline: "
        f"median {percentile(late, 0.5) * 1000:+.1f} ms, p99 {percentile(late, 0.99) * 1000:+.1f} ms, "
        f"max {percentile(late, 1.0) * 1000:+.1f} ms",
        f"monitor thread (sleeping {MONITOR_SLEEP * 1000:.0f} ms at a time), woke late "
        f"by: median {percentile(woke, 0.5) * 1000:.1f} ms, p99 {percentile(woke, 0.99) * 1000:.1f} "
        f"ms, max {percentile(woke, 1.0) * 1000:.1f} ms ({len(woke)} wakes)",
        f"CPU: {report.cpu_seconds:.1f}s in {report.seconds:.1f}s, "
        f"{report.cpu_seconds / report.seconds:.0%} of one core (the GIL lets threads use one)",
        f"threads: {report.threads_before} before, {report.threads_peak} at peak, "
        f"{report.threads_after} after (the shared watchdog thread not counted)",
        f"file descriptors: {report.fds_before} before, {report.fds_after} after",
        f"RSS: {report.rss_before_mib:.1f} MiB after the warm-up, {report.rss_after_mib:.1f} MiB "
        f"after the run: {report.rss_growth_mib:+.1f} MiB",
        f"threading.excepthook calls: {report.excepthook_calls}",
        f"attempts retried after a first chunk later than {IDLE_TIMEOUT}s (load), outside the "
        f"silent scenarios: {report.late_first_chunks()}",
        f"gateway: {report.gateway.get('requests')} requests seen, "
        f"{len(report.gateway.get('open_at_stop', ()))} still open 1 s after the clients closed",
        "",
        "all checks passed"
        if not report.problems
        else f"{len(report.problems)} problems:\n  " + "\n  ".join(report.problems[:50]),
    ]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=300, help="calls before measuring RSS")
    parser.add_argument("--max-overrun", type=float, default=0.1, help="seconds")
    parser.add_argument("--max-rss-growth-mib", type=float, default=20.0)
    parser.add_argument(
        "--pace",
        choices=sorted(PACES),
        default="llm",
        help="healthy streams: llm = 20 chunks 50 ms apart; burst = 5 chunks 20 ms apart",
    )
    parser.add_argument(
        "--no-pin-malloc",
        action="store_true",
        help="leave glibc's dynamic mmap threshold alone (RSS then shows its arenas' high-water)",
    )
    args = parser.parse_args(argv)
    report = run_soak(
        args.streams,
        args.threads,
        seed=args.seed,
        warmup=args.warmup,
        max_overrun=args.max_overrun,
        max_rss_growth_mib=args.max_rss_growth_mib,
        pin_malloc=not args.no_pin_malloc,
        pace=args.pace,
    )
    print(format_report(report))
    return 1 if report.problems else 0


if __name__ == "__main__":
    if sys.argv[1:] == [_CHILD_FLAG]:
        _gateway_child()
    else:
        sys.exit(main())
