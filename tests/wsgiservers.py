"""Real WSGI servers on 127.0.0.1 for tests: wsgiref in a thread, gunicorn in a process.

Both are bounded: every wait has a timeout, and leaving the ``with`` block
stops the server (the gunicorn process is terminated, then killed if it
lingers, and reaped).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any, Dict, Iterator, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def wsgiref_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with wsgiref on 127.0.0.1 (one request at a time); yields its URL."""
    server = make_server("127.0.0.1", 0, app, server_class=WSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="wsgiref-server"
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Gunicorn:
    """A running gunicorn master with one sync worker; ``log()`` reads its error log."""

    def __init__(self, url: str, process: subprocess.Popen, log_path: str) -> None:
        self.url = url
        self.process = process
        self._log_path = log_path

    def log(self) -> str:
        return pathlib.Path(self._log_path).read_text(encoding="utf-8", errors="replace")

    def worker_pid(self) -> int:
        return int(requests.get(self.url + "/ready", timeout=20).json()["pid"])


@contextlib.contextmanager
def gunicorn_server(*, timeout: int, env: Optional[Dict[str, str]] = None) -> Iterator[Gunicorn]:
    """gunicorn serving ``tests.wsgi_apps:application``, one sync worker, ``--timeout``.

    The listening socket is made here and handed over (``fd://``), so the port
    is known without a race.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    fd = listener.fileno()
    log_fd, log_path = tempfile.mkstemp(prefix="gunicorn-", suffix=".log")
    os.close(log_fd)
    command = [
        sys.executable, "-m", "gunicorn",
        "--bind", f"fd://{fd}",
        "--workers", "1",
        "--worker-class", "sync",
        "--timeout", str(timeout),
        "--graceful-timeout", "2",
        "--log-level", "info",
        "--error-logfile", log_path,
        "--chdir", str(ROOT),
        "tests.wsgi_apps:application",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        pass_fds=(fd,),
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    listener.close()  # the master has its own copy
    server = Gunicorn(f"http://127.0.0.1:{port}", process, log_path)
    try:
        server.worker_pid()  # the first answer: the worker is up
        yield server
    finally:
        _stop(process)
        os.unlink(log_path)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
