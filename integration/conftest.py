"""Fixtures for the integration tests: the unit suite's leak check, a real nginx, a real LiteLLM."""

from __future__ import annotations

import pathlib
import shutil
import socket
import subprocess
import time
from typing import Iterator

import pytest

from tests.conftest import no_leaks  # the same autouse check: no threads or fds left behind
from watchdog_sync.testing import FaultGateway

from .litellm_proxy import LiteLLMProxy, Routes

__all__ = ["Nginx", "litellm_proxy", "nginx", "no_leaks"]


def pytest_configure(config: pytest.Config) -> None:
    """The services here (nginx, LiteLLM, Redis's worker, a Ray cluster) start once per run:
    refuse pytest-xdist workers (the unit suite's ``-n 2``) with what to type instead."""
    if getattr(config.option, "numprocesses", None):
        raise pytest.UsageError(
            "integration/ runs in one process (its services start once per run): "
            "pytest integration -n 0"
        )


_START_SECONDS = 5.0
_STOP_SECONDS = 5.0

# One process (no master, no daemon), every path inside the test's own directory. Streaming
# needs proxy_buffering off (else nginx holds events back) and HTTP/1.1 upstream; a long
# proxy_read_timeout leaves silence to the client's own idle watchdog. proxy_ignore_client_abort
# stays off (the default): nginx closes the upstream connection when the client leaves.
_CONFIG = """\
daemon off;
master_process off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {root}/client_body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


class Nginx:
    """A running nginx in front of a FaultGateway; ``url(base_url)`` maps a gateway URL."""

    def __init__(self, root: pathlib.Path, gateway: FaultGateway) -> None:
        self.root = root
        self.port = _free_port()
        self._gateway = gateway
        config = root / "nginx.conf"
        config.write_text(_CONFIG.format(root=root, port=self.port, upstream=gateway.port))
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        self._proc = subprocess.Popen(
            [binary, "-p", str(root), "-c", str(config), "-e", str(root / "error.log")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def url(self, base_url: str) -> str:
        """The same route, through nginx."""
        return base_url.replace(self._gateway.url, f"http://127.0.0.1:{self.port}", 1)

    def _wait_listening(self) -> None:
        give_up = time.monotonic() + _START_SECONDS
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"nginx exited at start:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > give_up:
                    raise RuntimeError(f"nginx did not listen within {_START_SECONDS}s") from None
                time.sleep(0.02)

    def log(self) -> str:
        path = self.root / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM (nginx's fast shutdown), then SIGKILL if it is still there after 5 s."""
        self._proc.terminate()
        try:
            self._proc.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(_STOP_SECONDS)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def nginx(fault_gateway: FaultGateway, tmp_path: pathlib.Path) -> Iterator[Nginx]:
    """nginx on 127.0.0.1 proxying to this test's FaultGateway, stopped after the test."""
    proxy = Nginx(tmp_path, fault_gateway)
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def litellm_proxy(
    litellm_routes: Routes, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiteLLMProxy]:
    """The LiteLLM proxy on 127.0.0.1 with the module's ``litellm_routes`` as its models.

    One proxy per module (it takes 16-24 s to start); its FaultGateway closes every
    connection after its response (``keep_alive=False``), so no idle upstream socket that
    LiteLLM pools keeps a gateway thread alive between tests. Both stop after the module.
    """
    with FaultGateway(keep_alive=False) as gateway:
        proxy = LiteLLMProxy(tmp_path_factory.mktemp("litellm"), gateway, litellm_routes)
        try:
            yield proxy
        finally:
            proxy.stop()
