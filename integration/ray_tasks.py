"""The Ray tasks, actor and samples of integration/test_ray.py (pickled by value to the workers).

Every loop here is bounded in time; the ones that "ignore everything" still stop after
:data:`GIVE_UP` seconds, long after the tests have killed them.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

import watchdog_sync as ws
import watchdog_sync.ray as wsray

GIVE_UP = 120.0  # how long the samples that ignore every deadline would run if nobody stopped them
_MESSAGES = [{"role": "user", "content": "hi"}]


def _client(base_url: str) -> ws.ChatClient:
    return ws.ChatClient(base_url, api_key="sk-ray-test", model="m", idle_timeout=30.0)


def chat(base_url: str) -> str:
    """One streamed chat completion; returns its text."""
    stream = _client(base_url).stream(_MESSAGES)
    for _ in stream:
        pass
    return stream.text


@wsray.remote(max_retries=0)
def chat_task(base_url: str) -> str:
    """A task that streams a chat completion from ``base_url``."""
    return chat(base_url)


@wsray.remote(max_retries=0)
def time_left() -> float:
    """What the task's scope has left when it starts (``inf`` outside any scope)."""
    return ws.current_budget().remaining()


@wsray.remote(max_retries=0)
def hold(seconds: float) -> float:
    """Keep a worker busy for ``seconds`` (``time.sleep``: nothing interrupts it); returns the start."""
    started = time.time()
    time.sleep(seconds)
    return started


@wsray.remote(max_retries=0)
def started_at() -> float:
    """The wall-clock moment the task started."""
    return time.time()


@wsray.remote(max_retries=0)
def sleep_through(seconds: float) -> str:
    """``time.sleep(seconds)``: ignores Ray's cooperative cancel (only force ends it)."""
    time.sleep(seconds)
    return "woke"


@wsray.remote(max_retries=0)
def cooperative_spin(seconds: float) -> str:
    """Short sleeps in a Python loop: Ray's cooperative cancel (KeyboardInterrupt) ends it."""
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        time.sleep(0.01)
    return "spun"


@wsray.remote
class Agent:
    """An actor whose method calls carry the caller's deadline."""

    def time_left(self) -> float:
        return ws.current_budget().remaining()

    def chat(self, base_url: str) -> str:
        return chat(base_url)


def sample(case: Tuple[str, Any]) -> Any:
    """One benchmark sample: ``("ok", (base_url, seconds))``, ``("silent", base_url)``,
    ``("busy", None)`` (a loop that swallows everything) or ``("sleep", seconds)``."""
    kind, arg = case
    if kind == "ok":
        base_url, seconds = arg
        text = chat(base_url)
        ws.current_budget().sleep(seconds)
        return text
    if kind == "silent":
        return chat(arg)
    if kind == "busy":
        give_up = time.monotonic() + GIVE_UP
        spins = 0
        while time.monotonic() < give_up:
            try:
                while time.monotonic() < give_up:
                    spins += 1
            except BaseException:  # the point: nothing stops it but its process's end
                pass
        return spins
    if kind == "sleep":
        time.sleep(arg)
        return "woke"
    raise ValueError(f"unknown sample kind {kind!r}")


def window(_: Any) -> Dict[str, float]:
    """A sample that reports when it ran (wall clock) and what its scope had left."""
    started = time.time()
    left = ws.current_budget().remaining()
    time.sleep(0.2)
    return {"started": started, "ended": time.time(), "left": left}


def nap(seconds: Optional[float]) -> str:
    """A sample that waits in a library sleep, so any deadline ends it."""
    ws.current_budget().sleep(seconds if seconds is not None else GIVE_UP)
    return "rested"
