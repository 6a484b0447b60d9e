"""A real redis-server and real Celery worker processes on 127.0.0.1, started and reaped here.

Both are bounded: each start waits at most a few seconds for the process to answer (a
PING, a worker ping), each stop sends SIGTERM, then SIGKILL to the process group after a
few seconds, and reaps. Used by tests/test_celery.py and benchmarks/celery_fanout.py.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List, Optional

__all__ = ["RedisServer", "Worker", "free_port"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
_START_SECONDS = 30.0
_STOP_SECONDS = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _end(proc: subprocess.Popen[bytes], stop_seconds: float = _STOP_SECONDS) -> None:
    """SIGTERM, then SIGKILL to the process's own group (it was started in a new session)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(stop_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(stop_seconds)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # children a SIGKILLed parent left behind


def _pong(port: int) -> bool:
    """True when a Redis on ``port`` answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """``redis-server`` on a free port of 127.0.0.1, without persistence, in ``root``."""

    def __init__(self, root: pathlib.Path) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(binary):
            raise RuntimeError(
                "the Celery tests need redis-server: install it (apt-get install redis-server) "
                "or point WATCHDOG_SYNC_TEST_REDIS_URL at a running Redis on 127.0.0.1"
            )
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._log = root / "redis.log"
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(root), "--daemonize", "no",
             "--logfile", str(self._log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        give_up = time.monotonic() + _START_SECONDS
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server exited at start: {self.log()}")
            if _pong(self.port):
                return
            if time.monotonic() > give_up:
                raise RuntimeError(f"redis-server did not answer within {_START_SECONDS}s")
            time.sleep(0.02)

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-2000:] if self._log.exists() else ""

    def stop(self) -> None:
        _end(self._proc)


class Worker:
    """``celery -A integration.celery_app worker`` on ``queues``, ready once it answers a ping."""

    def __init__(
        self,
        app: Any,
        env: Dict[str, str],
        log: pathlib.Path,
        *,
        queues: List[str],
        concurrency: int = 2,
        pool: str = "prefork",
    ) -> None:
        self.name = f"wdsync-{uuid.uuid4().hex[:8]}@127.0.0.1"
        self._app = app
        self._log = log
        command = [
            sys.executable, "-m", "celery", "-A", "integration.celery_app", "worker",
            f"--pool={pool}", "-c", str(concurrency), "-n", self.name, "-Q", ",".join(queues),
            "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel=WARNING",
        ]  # fmt: skip
        with open(log, "wb") as out:
            self._proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        give_up = time.monotonic() + _START_SECONDS
        while not self._app.control.ping(destination=[self.name], timeout=0.3):
            if self._proc.poll() is not None:
                raise RuntimeError(f"the Celery worker exited at start:\n{self.log()}")
            if time.monotonic() > give_up:
                raise RuntimeError(f"the Celery worker did not answer within {_START_SECONDS}s")

    def consume(self, queue: str) -> None:
        """Start consuming ``queue`` too (a control command, answered before it returns)."""
        replies = self._app.control.add_consumer(queue, destination=[self.name], reply=True)
        if not replies:
            raise RuntimeError(f"the worker did not confirm consuming {queue!r}")

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-4000:] if self._log.exists() else ""

    def stop(self) -> Optional[int]:
        _end(self._proc)
        return self._proc.returncode
