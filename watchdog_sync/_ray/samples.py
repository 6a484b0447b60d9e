"""``run_samples``: the harness loop at cluster scale, each sample under ``run_sample`` on a Ray worker.

The samples run on a pool of runner actors (``SampleRunner``), one sample at a
time each, so the caller knows when each sample starts (when it is sent to an
idle runner) and so which runner to stop when one overruns. On the worker,
``run_sample`` (thread isolation) runs the sample under its timeout, clipped
to the caller's carried deadline: a sample the library can stop ends at its
deadline and its runner takes the next; one that ignores it (pure CPU,
``time.sleep``, a C call) comes back ``abandoned`` 0.05 s later, and its
runner, still holding that thread, is killed (``ray.kill``) and replaced. A
runner that does not answer by the timeout plus :data:`KILL_GRACE` is killed
as well and its sample reported ``abandoned``. Killed runners are replaced by
new actors, which take each a new worker process (0.4-0.8 s here), so a
sample never waits in a queue behind a dying one.

The caller's loop is a generator over ``ray.wait``: each wait ends at the
earliest of the next result, the next overrun and the enclosing scope's end.
Every runner is killed when the generator ends, however it ends.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sized, Tuple

from .._core.durations import Duration, validate_duration
from .._core.errors import DeadlineExceeded
from .._core.phase import in_phase
from .._core.scope import scoped_budget
from .._sample.outcome import failure_reason, safe_text
from .._sample.run import SampleResult, run_sample
from .carry import Carried, carried_now, not_started, seconds_left
from .get import WAIT_SLICE, unwrapped
from .lazy import import_ray

__all__ = ["KILL_GRACE", "SampleRunner", "run_samples"]

KILL_GRACE = 0.4
"""Seconds past a sample's timeout after which a runner that has not answered is killed."""

STAGE = "sample"


class SampleRunner:
    """The actor that runs samples: ``run`` calls ``run_sample(fn, item, timeout=...)``."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self._fn = fn

    def ready(self) -> bool:
        """Answers once the actor has started (its process and ``fn`` are loaded)."""
        return True

    def run(self, item: Any, timeout: float, carried: Carried) -> SampleResult[Any]:
        """One sample: ``fn(item)`` under ``min(timeout, the caller's time left)``."""
        left = seconds_left(carried)
        seconds = timeout if left is None else min(timeout, left)
        if left is not None and left <= 0:
            error = not_started(STAGE, -left)
            return SampleResult(False, None, error, error.reason, 0.0)
        return _portable(run_sample(self._fn, item, timeout=seconds))


def _portable(result: SampleResult[Any]) -> SampleResult[Any]:
    """``result`` with an error that pickles (Ray sends it back to the caller's process)."""
    error = result.error
    if error is None:
        return result
    try:
        pickle.dumps(error)
    except Exception as exc:
        replaced = RuntimeError(
            f"the sample raised {type(error).__name__}: {safe_text(error)} (it could not be "
            f"pickled back from its Ray worker: {type(exc).__name__})"
        )
        return SampleResult(
            result.ok, None, replaced, result.reason, result.elapsed, result.abandoned
        )
    return result


def run_samples(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    timeout: Duration,
    max_in_flight: Optional[int] = None,
    **ray_options: Any,
) -> Iterator[Tuple[int, SampleResult[Any]]]:
    """See ``watchdog_sync.ray.run_samples``."""
    if not callable(fn):
        raise TypeError(f"run_samples(fn, ...): fn must be callable, got {type(fn).__name__}")
    seconds = validate_duration(timeout, "timeout", allow_none=False, allow_zero=False)
    assert seconds is not None
    if max_in_flight is not None and (
        isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1
    ):
        raise ValueError(
            f"max_in_flight must be a whole number >= 1 (or None: one per free CPU), "
            f"got {max_in_flight!r}"
        )
    if ray_options.get("max_restarts", 0) != 0:
        raise ValueError(
            "run_samples replaces a runner it killed by itself: leave max_restarts out "
            f"(got max_restarts={ray_options['max_restarts']!r})"
        )
    try:
        iterator = iter(items)
    except TypeError:
        raise TypeError(
            f"run_samples(fn, items): items must be iterable, got {type(items).__name__}"
        ) from None
    count = len(items) if isinstance(items, Sized) else None
    return _Run(fn, iterator, count, seconds, max_in_flight, dict(ray_options)).results()


class _Slot:
    """One runner actor and what it is doing: starting (``ready``), idle, or running a sample."""

    __slots__ = ("actor", "index", "kill_at", "ready", "ref", "sent", "timeout")

    def __init__(self, actor: Any, ready: Any) -> None:
        self.actor = actor
        self.ready: Any = ready
        self.ref: Any = None
        self.index = -1
        self.sent = 0.0
        self.timeout = 0.0
        self.kill_at = math.inf


class _Run:
    def __init__(
        self,
        fn: Callable[[Any], Any],
        items: Iterator[Any],
        count: Optional[int],
        timeout: float,
        max_in_flight: Optional[int],
        options: Dict[str, Any],
    ) -> None:
        self._fn = fn
        self._items = enumerate(items)
        self._count = count
        self._timeout = timeout
        self._max_in_flight = max_in_flight
        options.setdefault("num_cpus", 1)
        options["max_restarts"] = 0  # a dead runner is replaced here, not by Ray
        self._options = options
        self._slots: List[_Slot] = []
        self._ray: Any = None
        self._runner: Any = None
        self._fn_ref: Any = None

    def results(self) -> Iterator[Tuple[int, SampleResult[Any]]]:
        ray = import_ray()
        if not ray.is_initialized():
            raise RuntimeError(
                "watchdog_sync.ray.run_samples: Ray is not initialized; call ray.init() first "
                "(a local cluster: ray.init(num_cpus=N); an existing one: ray.init(address=...))"
            )
        budget = scoped_budget()
        if budget is not None:
            budget.check()
        runners = self._runner_count(ray)
        if runners == 0:
            return
        self._ray = ray
        self._runner = ray.remote(**self._options)(SampleRunner)
        self._fn_ref = ray.put(self._fn)
        exhausted = False
        try:
            self._slots = [self._start() for _ in range(runners)]
            while True:
                for slot in self._slots:
                    if exhausted:
                        break
                    if slot.ready is None and slot.ref is None:
                        exhausted = not self._send(slot)
                busy = [slot for slot in self._slots if slot.ref is not None]
                if exhausted and not busy:
                    return
                yield from self._next(busy, budget)
        finally:
            for slot in self._slots:
                self._kill(slot.actor)
            self._slots = []

    def _runner_count(self, ray: Any) -> int:
        wanted = self._max_in_flight
        if wanted is None:
            cpus = float(ray.cluster_resources().get("CPU", 1.0))
            each = float(self._options.get("num_cpus") or 0)
            wanted = max(1, int(cpus // each) if each > 0 else int(cpus))
        return wanted if self._count is None else min(wanted, self._count)

    def _start(self) -> _Slot:
        actor = self._runner.remote(self._fn_ref)
        return _Slot(actor, actor.ready.remote())

    def _send(self, slot: _Slot) -> bool:
        """Send the next item to ``slot``'s idle runner; False when there are no more items."""
        nxt = next(self._items, None)
        if nxt is None:
            return False
        index, item = nxt
        carried = carried_now()  # raises Cancelled if the enclosing scope has ended
        now = time.monotonic()
        left = seconds_left(carried)
        seconds = self._timeout if left is None else max(0.0, min(self._timeout, left))
        slot.ref = slot.actor.run.remote(item, self._timeout, carried)
        slot.index, slot.sent, slot.timeout = index, now, seconds
        slot.kill_at = now + seconds + KILL_GRACE
        return True

    def _next(self, busy: List[_Slot], budget: Any) -> Iterator[Tuple[int, SampleResult[Any]]]:
        """Wait for the next result, runner start or overrun; yield what finished."""
        ray = self._ray
        starting = [slot for slot in self._slots if slot.ready is not None]
        refs = [slot.ref for slot in busy] + [slot.ready for slot in starting]
        wait = min((slot.kill_at for slot in busy), default=math.inf) - time.monotonic()
        if budget is not None:
            wait = min(wait, budget.remaining())
        wait = max(0.0, min(wait, WAIT_SLICE))
        ready = set(ray.wait(refs, num_returns=1, timeout=wait)[0]) if refs else set()
        for slot in starting:
            if slot.ready in ready:
                ray.get(slot.ready)  # a runner that cannot start (fn not importable...) raises
                slot.ready = None
        for slot in busy:
            if slot.ref in ready:
                yield slot.index, self._finished(slot)
            elif time.monotonic() >= slot.kill_at:
                if ray.wait([slot.ref], timeout=0)[0]:  # it answered after all
                    yield slot.index, self._finished(slot)
                else:
                    yield slot.index, self._overran(slot)
        if budget is not None:
            with in_phase(
                "wait"
            ):  # the enclosing scope ended: the runners are killed on the way out
                budget.check()

    def _finished(self, slot: _Slot) -> SampleResult[Any]:
        ray = self._ray
        ref, slot.ref = slot.ref, None
        try:
            result: SampleResult[Any] = ray.get(ref)
        except ray.exceptions.RayError as exc:
            error = unwrapped(exc)
            died = isinstance(exc, ray.exceptions.RayActorError)
            reason = "process_exited" if died else failure_reason(error)
            result = SampleResult(False, None, error, reason, time.monotonic() - slot.sent)
            if died:
                self._replace(slot)
            return result
        if result.abandoned:
            self._replace(slot)  # its worker still runs the sample's thread
        return result

    def _overran(self, slot: _Slot) -> SampleResult[Any]:
        elapsed = time.monotonic() - slot.sent
        self._replace(slot)
        error = DeadlineExceeded(
            f"sample {slot.index} did not return within its timeout of {slot.timeout:.2f}s "
            f"plus {KILL_GRACE:g}s; its Ray worker was killed",
            phase="wait",
            stage=STAGE,
            elapsed=elapsed,
            remaining=0.0,
        )
        return SampleResult(False, None, error, error.reason, elapsed, abandoned=True)

    def _replace(self, slot: _Slot) -> None:
        self._kill(slot.actor)
        fresh = self._start()
        slot.actor, slot.ready, slot.ref, slot.kill_at = fresh.actor, fresh.ready, None, math.inf

    def _kill(self, actor: Any) -> None:
        # Already dead, or Ray is shutting down: nothing is left to stop.
        with contextlib.suppress(Exception):
            self._ray.kill(actor, no_restart=True)
