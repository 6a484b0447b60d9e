"""watchdog_sync.ray on a real local Ray cluster (``ray.init(num_cpus=2)``), against the FaultGateway.

One cluster for the module (about 4-5 s to start), shut down at its end. The tasks, the
actor and the samples live in integration/ray_tasks.py, pickled by value to the workers.
Every test ends with nothing running on the cluster: every Ray worker process idle and
every CPU free again.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import os
import time
from typing import Any, Dict, Iterator, List, Set, Tuple

from . import ray_env  # noqa: F401  (before ray: loopback only)

# isort: split
import psutil
import pytest
import ray

import watchdog_sync as ws
import watchdog_sync.ray as wsray
from tests.conftest import _fds, _threads
from tests.waiting import wait_for
from watchdog_sync.testing import FaultGateway

from . import ray_tasks

pytestmark = pytest.mark.timeout(90)

CPUS = 2
# What a run of run_samples spends beside its samples' own time, fixed costs that do not grow
# with the run: the runners' start and the replacement of the two killed by the hanging samples
# (0.8 s + 0.56 s + 0.72 s measured on a quiet machine, docs/howto-ray.md), with room for a
# loaded one (CI saw 2.4 s). A hanging sample whose runner slot stayed held until the sample
# ended by itself (the sleep(600)) would not fit in it.
RUN_OVERHEAD = 3.5
_SETTLE = 5.0  # how long a check waits for Ray to let go of killed workers and freed CPUs


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    """A throwaway local Ray cluster for the module, and a warm worker per CPU."""
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # set by ray_env
    ray.cloudpickle.register_pickle_by_value(ray_tasks)
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    _DRIVER_PORTS.update(_listening(psutil.Process()))  # the driver's own Ray servers
    try:
        ray.get([ray_tasks.started_at.remote() for _ in range(CPUS)])
        yield
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(ray_tasks)
    left = lambda: [p.pid for p in psutil.Process().children(recursive=True)]  # noqa: E731
    assert wait_for(lambda: not left(), _SETTLE), f"Ray processes left after shutdown: {left()}"


_NOT_WORKERS = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _workers() -> List[Tuple[int, str]]:
    """This cluster's Ray worker processes that are not idle (a task or an actor): pid, title."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            title = " ".join(proc.cmdline()).strip()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if title.startswith("ray::") and not title.startswith(_NOT_WORKERS):
            found.append((proc.pid, title))
    return found


def _busy_workers() -> List[str]:
    return [title for _, title in _workers()]


def _running(task_name: str) -> int:
    """The pid of the worker process running ``task_name`` (waits up to a few seconds)."""
    pids: List[int] = []

    def found() -> bool:
        pids[:] = [pid for pid, title in _workers() if title.startswith(f"ray::{task_name}")]
        return len(pids) == 1

    assert wait_for(found, _SETTLE), f"no worker runs {task_name}: {_busy_workers()}"
    return pids[0]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


_DRIVER_PORTS: Set[int] = set()  # the ports the driver's own Ray servers listen on
_WORKER_PORTS: Set[int] = set()  # every port seen listening in a cluster process, kept


def _listening(proc: psutil.Process) -> Set[int]:
    try:
        found = proc.net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return set()
    return {c.laddr.port for c in found if c.status == psutil.CONN_LISTEN}


def _ray_connections() -> int:
    """This process's TCP connections with the cluster's processes (Ray's own client pool).

    A connection is Ray's when the process at its other end is one of Ray's, or when it
    reaches a port once seen listening in a process under this one: a worker's ports are
    remembered after it exits, since Ray kills idle workers and the driver's connection to
    one stays (in CLOSE_WAIT) until Ray's pool drops it, which can take longer than a test's
    teardown waits. Asking for the other end's process, not only for the ports seen
    listening, also counts a connection to a Ray process whose port was never seen
    listening (a worker started between two looks)."""
    for proc in psutil.Process().children(recursive=True):
        _WORKER_PORTS.update(_listening(proc))
    peers = _peer_processes()
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr
        and (
            c.raddr.port in _WORKER_PORTS
            or c.laddr.port in _DRIVER_PORTS
            or _is_ray(peers.get((c.raddr.port, c.laddr.port)))
        )
    )


def _peer_processes() -> Dict[Tuple[int, int], int]:
    """Each connected TCP socket's process, by (local, remote) port: on loopback the two
    ports name one socket (every process's: CI runs as root; where that is refused, none)."""
    try:
        found = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return {}
    return {(c.laddr.port, c.raddr.port): c.pid for c in found if c.raddr and c.pid is not None}


def _is_ray(pid: Any) -> bool:
    """The process is one of Ray's (a worker, titled ``ray::...``, or one of Ray's programs)."""
    if pid is None or pid == os.getpid():
        return False
    try:
        command = " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return command.startswith("ray::") or "/ray/" in command


def _descriptors() -> Dict[str, str]:
    """What each of this process's descriptors is (Linux): for a failure's message."""
    found = {}
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """The unit suite's check (tests/conftest.py), but for the descriptors of Ray's own client
    pool: the driver opens a connection to each new worker process it talks to and keeps it."""
    before_threads = set(_threads())
    before_fds = _fds() - _ray_connections()
    before = _descriptors()
    yield
    give_up = time.monotonic() + _SETTLE
    while True:
        gc.collect()
        extra = [t for t in _threads() if t not in before_threads and t.is_alive()]
        fds = _fds() - _ray_connections()
        if (not extra and fds <= before_fds) or time.monotonic() > give_up:
            break
        time.sleep(0.05)
    assert not extra, f"threads left running: {[t.name for t in extra]}"
    new = {fd: what for fd, what in _descriptors().items() if before.get(fd) != what}
    assert fds <= before_fds, (
        f"file descriptors leaked: {before_fds} before, {fds} after; new: {new}; "
        f"TCP: {psutil.Process().net_connections(kind='tcp')}"
    )


def _nothing_running() -> bool:
    return not _busy_workers() and ray.available_resources().get("CPU", 0.0) == CPUS


@pytest.fixture(autouse=True)
def idle_afterwards() -> Iterator[None]:
    """Each test leaves the cluster as it found it: no busy worker, every CPU free."""
    yield
    assert wait_for(_nothing_running, _SETTLE), (
        f"still running on the cluster: {_busy_workers()}, "
        f"{ray.available_resources().get('CPU', 0.0)} of {CPUS} CPUs free"
    )


def test_a_task_sent_with_1_5s_left_ends_at_the_deadline_inside_the_worker(
    fault_gateway: FaultGateway,
) -> None:
    """The worker's ChatClient call on a silent stream stops at the caller's deadline."""
    url = fault_gateway.base_url("silent_after_200")
    with ws.deadline(1.5):
        sent = time.monotonic()
        ref = ray_tasks.chat_task.remote(url)
    with pytest.raises(ws.DeadlineExceeded) as caught:
        wsray.get(ref)  # outside the scope: the task's own error, not the caller's wait
    arrived = time.monotonic() - sent
    error = caught.value
    assert type(error) is ws.DeadlineExceeded
    assert error.reason == "deadline_exceeded" and error.stage == "ray:chat_task"
    assert 1.5 - 0.05 <= arrived < 1.5 + 0.5, arrived
    assert 1.3 <= error.elapsed < 1.5 + 0.3  # measured on the worker, from its start
    assert len(fault_gateway.requests_seen(url)) >= 1


def test_a_task_queued_behind_busy_workers_past_its_deadline_never_starts(
    fault_gateway: FaultGateway,
) -> None:
    """Both CPUs busy for 1.5 s; a task sent with 0.5 s left is refused when a worker takes it."""
    url = fault_gateway.base_url("ok")
    holders = [ray_tasks.hold.remote(1.5) for _ in range(CPUS)]
    assert wait_for(lambda: len(_busy_workers()) == CPUS, _SETTLE)
    with ws.deadline(0.5):
        late = ray_tasks.chat_task.remote(url)
    wsray.get(holders)
    with pytest.raises(ws.DeadlineExceeded, match="not started") as caught:
        wsray.get(late)
    assert caught.value.stage == "ray:chat_task" and caught.value.elapsed == 0.0
    assert fault_gateway.requests_seen(url) == []  # its body never ran


def test_get_at_the_scope_end_force_cancels_a_task_and_its_cpu_is_free_within_1s() -> None:
    """A task in ``time.sleep`` ignores the cooperative cancel: forced, its CPU serves the next.

    The next task needs a new worker process, which Ray starts in 0.4-0.8 s on a quiet machine
    (more on a loaded one): the bound on its start is generous, the one on the CPU is not."""
    other = ray_tasks.hold.remote(
        4.0
    )  # keeps the second CPU busy: the next task needs the freed one
    stuck = ray_tasks.sleep_through.remote(600.0)  # sent outside any scope: nothing stops it itself
    pid = _running("sleep_through")
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(1.0):
        wsray.get(stuck)
    raised, raised_at = time.time(), time.monotonic()
    assert 1.0 <= raised_at - started < 1.0 + 0.5
    assert wait_for(lambda: ray.available_resources().get("CPU", 0.0) >= 1.0, 1.0)
    assert time.monotonic() - raised_at < 1.0
    next_started = ray.get(ray_tasks.started_at.remote(), timeout=_SETTLE)
    assert next_started - raised < 3.0, next_started - raised
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(stuck, timeout=_SETTLE)
    assert wait_for(lambda: not _alive(pid), _SETTLE)  # forced: Ray killed its worker process
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.1):
        wsray.get(other)  # and the holder is cancelled the same way


def test_get_cancels_cooperatively_first() -> None:
    """A task in a Python loop ends on Ray's cooperative cancel, before the force grace."""
    spinning = ray_tasks.cooperative_spin.remote(600.0)
    pid = _running("cooperative_spin")
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.5):
        wsray.get(spinning)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(spinning, timeout=_SETTLE)
    assert _alive(pid)  # not forced: the same worker process lives on, idle


def test_get_with_cancel_false_leaves_the_task_running() -> None:
    """``cancel=False`` only stops the wait, as ``ray.get(timeout=)`` does."""
    ref = ray_tasks.hold.remote(1.0)
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.3):
        wsray.get(ref, cancel=False)
    assert isinstance(ray.get(ref, timeout=_SETTLE), float)  # it ran to its end


def test_get_returns_values_in_the_shape_it_was_given() -> None:
    """One ref gives one value, a list gives a list, inside a scope and outside."""
    with ws.deadline(10):
        one = wsray.get(ray_tasks.time_left.remote())
        both = wsray.get([ray_tasks.time_left.remote(), ray_tasks.time_left.remote()])
    assert 0 < one <= 10 and len(both) == 2 and all(0 < left <= 10 for left in both)
    assert wsray.get(ray_tasks.time_left.remote()) == float("inf")


@pytest.mark.parametrize(
    ("scenario", "error_class", "reason", "fields"),
    [
        ("http401", ws.HTTPStatusError, "auth", {"status": 401}),
        ("no_finish_reason", ws.StreamProtocolError, "no_finish_reason", {}),
        ("silent_after_200", ws.DeadlineExceeded, "deadline_exceeded", {"stage": "ray:chat_task"}),
    ],
)
def test_errors_keep_their_class_and_reason_through_ray(
    fault_gateway: FaultGateway, scenario: str, error_class: type, reason: str, fields: Any
) -> None:
    """The WatchdogError a task raised comes back from get() as itself, with its fields."""
    url = fault_gateway.base_url(scenario)
    with ws.deadline(1.0):
        ref = ray_tasks.chat_task.remote(url)
    with pytest.raises(ws.WatchdogError) as caught:
        wsray.get(ref)
    error = caught.value
    assert type(error) is error_class
    assert error.reason == reason
    assert {name: getattr(error, name) for name in fields} == fields
    assert isinstance(error.__cause__, ray.exceptions.RayTaskError)  # the worker's traceback


def test_an_actor_method_call_carries_the_deadline(fault_gateway: FaultGateway) -> None:
    """Inside a scope an actor call runs under its time left; a silent stream stops at it."""
    agent = ray_tasks.Agent.remote()
    try:
        assert wsray.get(agent.time_left.remote()) == float("inf")
        with ws.deadline(2.0):
            left = wsray.get(agent.time_left.remote())
        assert 1.0 < left <= 2.0
        url = fault_gateway.base_url("silent_after_200")
        with ws.deadline(1.0):
            sent = time.monotonic()
            ref = agent.chat.remote(url)
        with pytest.raises(ws.DeadlineExceeded) as caught:
            wsray.get(ref)
        assert caught.value.stage == "ray:Agent.chat"
        assert 1.0 - 0.05 <= time.monotonic() - sent < 1.0 + 0.5
    finally:
        ray.kill(agent.ray_handle)


def _ideal_schedule(durations: List[float], workers: int) -> float:
    """The makespan of running ``durations`` in order, each on the first free worker."""
    free = [0.0] * workers
    for seconds in durations:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def test_run_samples_over_60_samples_on_2_workers_10_of_them_hanging(
    fault_gateway: FaultGateway,
) -> None:
    """50 ok, 10 deadline_exceeded (silent streams, a busy loop, a sleep(600)), each ended by its
    timeout + 0.5 s; the wall time within RUN_OVERHEAD of the ideal schedule; nothing left
    running."""
    timeout, work = 1.0, 0.6
    ok_url = fault_gateway.base_url("ok")
    hanging: List[Tuple[str, Any]] = [("busy", None), ("sleep", 600.0)]
    hanging += [("silent", fault_gateway.base_url("silent_after_200"))] * 8
    cases: List[Tuple[str, Any]] = [("ok", (ok_url, work))] * 50
    for slot, case in zip(range(3, 60, 6), hanging):
        cases.insert(slot, case)
    started = time.monotonic()
    results = list(wsray.run_samples(ray_tasks.sample, cases, timeout=timeout))
    wall = time.monotonic() - started
    by_index = dict(results)
    assert sorted(by_index) == list(range(60))
    ok = [i for i, result in by_index.items() if result.ok]
    late = {i: result for i, result in by_index.items() if not result.ok}
    assert len(ok) == 50 and all(cases[i][0] == "ok" for i in ok)
    assert len(late) == 10 and all(cases[i][0] != "ok" for i in late)
    for i, result in late.items():
        assert result.reason == "deadline_exceeded", (cases[i][0], result.error)
        assert isinstance(result.error, ws.DeadlineExceeded)
        assert result.elapsed <= timeout + 0.5, (cases[i][0], result.elapsed)
        assert result.abandoned == (cases[i][0] in ("busy", "sleep"))
    # The ideal: each ok sample takes what it took on its worker, each hanging one its timeout.
    spans = [by_index[i].elapsed if kind == "ok" else timeout for i, (kind, _) in enumerate(cases)]
    ideal = _ideal_schedule(spans, CPUS)
    assert wall <= ideal + RUN_OVERHEAD, f"wall {wall:.2f}s, ideal {ideal:.2f}s"


def test_run_samples_keeps_at_most_max_in_flight_running() -> None:
    """With max_in_flight=1 on 2 CPUs the samples run one after the other."""
    results = dict(wsray.run_samples(ray_tasks.window, range(4), timeout=5, max_in_flight=1))
    spans = sorted((result.value["started"], result.value["ended"]) for result in results.values())
    assert len(spans) == 4 and all(result.ok for result in results.values())
    assert all(ended <= next_start for (_, ended), (next_start, _) in zip(spans, spans[1:]))


def test_run_samples_obeys_an_enclosing_deadline() -> None:
    """The run ends at the scope's deadline: DeadlineExceeded, the runners killed, no more samples."""
    seen: List[int] = []
    started = time.monotonic()
    with pytest.raises(ws.DeadlineExceeded), ws.deadline(3.0):
        for index, result in wsray.run_samples(ray_tasks.nap, [0.2] * 4 + [None] * 4, timeout=30):
            assert result.ok
            seen.append(index)
    assert 3.0 <= time.monotonic() - started < 3.0 + 0.5
    assert sorted(seen) == [0, 1, 2, 3]


def test_run_samples_clips_each_sample_to_the_enclosing_deadline() -> None:
    """A sample's scope has min(timeout, the caller's time left)."""
    with ws.deadline(3.0):
        results = dict(wsray.run_samples(ray_tasks.window, range(2), timeout=20))
    assert all(0.5 < result.value["left"] <= 3.0 for result in results.values())


def test_breaking_out_of_run_samples_kills_its_runners() -> None:
    """A consumer that stops early leaves nothing running (checked after the test)."""
    run = wsray.run_samples(ray_tasks.nap, [0.1] + [None] * 3, timeout=60)
    index, result = next(run)
    assert result.ok and index == 0
    run.close()
