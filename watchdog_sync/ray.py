"""Ray integration: deadlines that cross Ray tasks, and run_sample at cluster scale.

``import watchdog_sync`` does not import this module, and importing it does not
import Ray: the functions below do, when first used. How-to: ``docs/howto-ray.md``.

::

    import ray
    import watchdog_sync as ws
    import watchdog_sync.ray as wsray

    @wsray.remote
    def answer(question):
        return client.complete([{"role": "user", "content": question}])  # bounded on the worker

    ray.init()
    with ws.deadline(30):
        reply = wsray.get(answer.remote("2+2?"))   # DeadlineExceeded after 30 s, task cancelled

    for index, result in wsray.run_samples(one_sample, items, timeout=60):
        ...
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional, Tuple

from ._core.durations import Duration
from ._ray import get as _get
from ._ray import remote as _remote
from ._ray import samples as _samples
from ._sample.run import SampleResult

__all__ = ["get", "remote", "run_samples"]


def remote(fn: Any = None, **ray_options: Any) -> Any:
    """Like ``ray.remote``, with the caller's deadline carried into each task and actor call.

    Use it as ``ray.remote`` is used: ``@remote``, ``@remote(num_cpus=2)``, on
    a function (``f.remote(...)``, ``f.options(...).remote(...)``) or on an
    actor class (``A.remote(...)`` creates the actor; ``handle.method.remote(...)``
    calls it; ``handle.ray_handle`` is Ray's own handle, for ``ray.kill``).

    A task (or actor method call) sent inside a :func:`~watchdog_sync.deadline`
    scope carries the scope's deadline as the seconds left plus the wall-clock
    moment of sending, so time spent queued counts and no two machines'
    monotonic clocks are compared. On the worker it runs inside
    ``deadline(time left)``: every library call in it (``ChatClient``,
    ``Session``, SDKs after ``instrument()``) stops at the caller's deadline.

    On timeout: the task raises :class:`~watchdog_sync.DeadlineExceeded`
    (reason ``'deadline_exceeded'``, stage ``'ray:<function>'``), which
    :func:`get` raises again with its class and fields. A task whose deadline
    passed while it was queued does not run and raises it at once. Sending
    inside a scope that has already ended (or was cancelled) raises the scope's
    :class:`~watchdog_sync.Cancelled`, which the scope converts. Outside any
    scope a task runs exactly as under ``ray.remote``.

    The wall clocks of the machines are assumed to agree (NTP) to well within
    the deadlines used; a worker whose clock runs behind never gets more than
    the caller had left when it sent the task.

    Async functions and generators (and actor classes with such methods) are
    refused with ``TypeError``: the scope is synchronous. Static and class
    methods, and dunder methods, carry nothing.
    """
    return _remote.remote(fn, **ray_options)


def get(refs: Any, *, cancel: bool = True) -> Any:
    """``ray.get(refs)`` (one ref or a list) bounded by the current scope.

    Outside any scope it is ``ray.get``. Inside one it waits at most the time
    left; ``cancel()`` of the scope's budget from another thread is seen within
    0.1 s.

    On timeout (and on cancel): with ``cancel=True`` the unfinished tasks are
    cancelled, cooperatively first (``ray.cancel``), and those still running
    0.2 s later by force (``ray.cancel(force=True)``: Ray kills the worker
    process and starts a new one), so no worker keeps running work nobody waits
    for; actor method calls cannot be forced (Ray refuses), so they only get
    the cooperative cancel. Then the scope's :class:`~watchdog_sync.Cancelled`
    is raised and the scope turns it into
    :class:`~watchdog_sync.DeadlineExceeded` (or ``OperationCancelled``), so
    ``except Exception`` inside the scope cannot swallow it. With
    ``cancel=False`` the tasks are left running, as ``ray.get(timeout=)`` does.
    Fetching finished values cannot be cut short: values whose fetch ended
    after the deadline are not returned (the scope's end is raised instead).

    A task that raised a :class:`~watchdog_sync.WatchdogError` makes ``get``
    raise that error, with its class, reason and fields (the ``RayTaskError``
    with the worker's traceback is its ``__cause__``); every other task error is
    raised as Ray raises it.
    """
    return _get.get(refs, cancel=cancel)


def run_samples(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    timeout: Duration,
    max_in_flight: Optional[int] = None,
    **ray_options: Any,
) -> Iterator[Tuple[int, SampleResult[Any]]]:
    """Run ``fn(item)`` for each item on the Ray cluster, each under its own hard ``timeout``.

    ``run_sample``'s semantics at cluster scale: each sample runs on a Ray
    worker under :func:`~watchdog_sync.run_sample` (thread isolation), and the
    ``(index, SampleResult)`` pairs are yielded as the samples finish (not in
    order). At most ``max_in_flight`` samples run at once (default: the
    cluster's CPUs divided by the ``num_cpus`` each sample takes, 1 unless
    ``ray_options`` say otherwise); ``ray_options`` are Ray actor options
    (``num_cpus``, ``resources``, ``runtime_env``, ``scheduling_strategy``, ...).

    The samples run on that many runner actors, one sample at a time each, and
    ``timeout`` counts from the moment the sample is sent to an idle runner.
    On timeout: a sample the library can stop ends at its deadline
    (``reason='deadline_exceeded'``) and its runner takes the next one; a
    sample that ignores the deadline (pure CPU, ``time.sleep``, C code) comes
    back ``abandoned=True`` 0.05 s later and its runner is killed and replaced,
    so no worker keeps running it; a runner that does not answer within
    ``timeout`` + 0.4 s is killed too (``abandoned=True``). Every result comes
    back by ``timeout`` + 0.5 s (plus scheduling delay on a loaded machine).
    A replacement runner takes a new worker process (0.4-0.8 s to start
    here); a sample is sent to it only once it has started. A sample that
    kills its worker process comes back with ``reason='process_exited'``.

    Inside a :func:`~watchdog_sync.deadline` scope the whole run obeys it: each
    sample's timeout is clipped to the time left, and at the scope's end (or
    its ``cancel()``) the runners are killed and the scope's
    :class:`~watchdog_sync.Cancelled` propagates (the scope raises
    ``DeadlineExceeded`` / ``OperationCancelled``); the unfinished samples
    yield nothing. Breaking out of the loop, or any error, kills the runners
    too: nothing is left running on the cluster.

    While the loop's body runs, the generator does not wait: finished runners
    get their next sample when the loop asks for the next result.

    Raises:
        TypeError: ``fn`` is not callable or ``items`` is not iterable.
        ValueError: ``timeout`` is not finite and > 0, ``max_in_flight`` < 1, or
            ``max_restarts`` is given (the runners are replaced by ``run_samples``).
        RuntimeError: Ray is not initialized (call ``ray.init(...)`` first).
    """
    return _samples.run_samples(
        fn, items, timeout=timeout, max_in_flight=max_in_flight, **ray_options
    )
