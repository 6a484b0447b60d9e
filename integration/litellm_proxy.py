"""A real LiteLLM proxy (``litellm --config``) on 127.0.0.1 with FaultGateway routes upstream.

One child process, started from the ``integration`` extra's ``litellm`` script, with a
config file written here: one model per route (``openai/<name>`` whose ``api_base`` is a
FaultGateway ``base_url``), a master key, and LiteLLM's own upstream read limit
(``stream_timeout``). It runs offline: every remote fetch LiteLLM knows of is switched to
its bundled copy, the child gets a minimal environment (no API keys, no database URL), and
every HTTP proxy variable points at a trap socket on 127.0.0.1 that counts what reaches it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, Mapping, Optional, Tuple

import requests

from watchdog_sync.testing import FaultGateway

__all__ = ["MASTER_KEY", "STREAM_TIMEOUT", "LiteLLMProxy", "Routes"]

Routes = Mapping[str, Tuple[str, Dict[str, Any]]]  # model name -> (scenario, options)

MASTER_KEY = "sk-watchdog-sync-litellm-master"
UPSTREAM_KEY = "sk-watchdog-sync-upstream"
# LiteLLM's read limit on its upstream connection; without one its chat calls wait 600 s.
STREAM_TIMEOUT = 2.0
_WARM_ROUTE = "warm-up"
_START_SECONDS = 90.0  # measured 16-24 s to healthy on 2 busy cores
_WARM_SECONDS = 30.0  # the first request spends 1.5-1.8 s in LiteLLM's lazy imports
_STOP_SECONDS = 5.0
# LiteLLM's switches to its bundled copies (cost map, Anthropic beta headers, autorouter
# presets, blog posts, policy templates) and off for the admin UI and the start-up banner.
_OFFLINE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "DISABLE_ADMIN_UI": "True",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "HF_HUB_OFFLINE": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


class LiteLLMProxy:
    """A running LiteLLM proxy in front of ``gateway``; ``stop()`` ends and reaps it.

    ``base_url`` is its OpenAI-compatible ``/v1`` URL; each route's name is its model.
    """

    def __init__(self, root: pathlib.Path, gateway: FaultGateway, routes: Routes) -> None:
        executable = _executable()  # first: a missing install opens nothing
        self.root = root
        self.gateway = gateway
        self.upstream = {name: gateway.base_url(s, **opts) for name, (s, opts) in routes.items()}
        warm_up = gateway.base_url("ok", chunks=1)
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._trap = _listen()
        config = root / "litellm.json"  # JSON is YAML: LiteLLM reads it as its config
        config.write_text(json.dumps(_config({**self.upstream, _WARM_ROUTE: warm_up}), indent=2))
        self._log = open(root / "litellm.log", "wb")  # noqa: SIM115 (closed in stop())
        self._proc = subprocess.Popen(
            [
                executable,
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            env=_environment(root, self._trap.getsockname()[1]),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends whatever it spawned
        )
        try:
            self.started_in = self._wait_healthy()
            self._warm_up()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self) -> float:
        started = time.monotonic()
        give_up = started + _START_SECONDS
        url = f"http://127.0.0.1:{self.port}/health/liveliness"
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the LiteLLM proxy exited at start:\n{self.log()}")
            try:
                if requests.get(url, timeout=1.0).status_code == 200:
                    return time.monotonic() - started
            except requests.RequestException:
                pass
            if time.monotonic() > give_up:
                raise RuntimeError(f"the LiteLLM proxy was not healthy within {_START_SECONDS}s")
            time.sleep(0.1)

    def _warm_up(self) -> None:
        """One whole stream through a spare route, so no test pays LiteLLM's first call."""
        body = {
            "model": _WARM_ROUTE,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        headers = {"Authorization": f"Bearer {MASTER_KEY}"}
        url = f"{self.base_url}/chat/completions"
        with requests.post(
            url, json=body, headers=headers, stream=True, timeout=_WARM_SECONDS
        ) as r:
            lines = [line for line in r.iter_lines() if line]
        if r.status_code != 200 or lines[-1:] != [b"data: [DONE]"]:
            raise RuntimeError(
                f"the LiteLLM warm-up stream failed ({r.status_code}):\n{self.log()}"
            )

    def outbound_attempts(self) -> int:
        """Connections that reached the trap the proxy variables point at (accepted, closed)."""
        self._trap.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self._trap.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def log(self) -> str:
        """The proxy's output so far (its last 4,000 characters)."""
        self._log.flush()
        return (self.root / "litellm.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 5 s; reaps it, closes the log and trap.

        A request LiteLLM still holds upstream keeps it from exiting on SIGTERM alone. The
        proxy is reaped last, so its process group's id cannot be reused while it is signalled.
        """
        pid = self._proc.pid
        try:
            _signal_group(pid, signal.SIGTERM)
            if not _exited(pid, _STOP_SECONDS):
                _signal_group(pid, signal.SIGKILL)
                _exited(pid, _STOP_SECONDS)
            _signal_group(pid, signal.SIGKILL)  # whatever it left running in its group
            self._proc.wait(_STOP_SECONDS)
        finally:
            self._log.close()
            self._trap.close()


def _config(upstream: Mapping[str, str]) -> Dict[str, Any]:
    models = [
        {
            "model_name": name,
            "litellm_params": {
                "model": f"openai/{name}",
                "api_base": url,
                "api_key": UPSTREAM_KEY,
                "stream_timeout": STREAM_TIMEOUT,
            },
        }
        for name, url in upstream.items()
    ]
    return {"model_list": models, "general_settings": {"master_key": MASTER_KEY}}


def _environment(root: pathlib.Path, trap_port: int) -> Dict[str, str]:
    trap = f"http://127.0.0.1:{trap_port}"
    proxies = {name: trap for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    proxies.update({name.lower(): trap for name in proxies})
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        **_OFFLINE,
        **proxies,
    }


def _executable() -> str:
    beside = pathlib.Path(sys.executable).parent / "litellm"
    found: Optional[str] = str(beside) if beside.exists() else shutil.which("litellm")
    if found is None:
        raise RuntimeError(
            "the LiteLLM proxy is not installed: pip install -e '.[integration]' (litellm[proxy])"
        )
    return found


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group has ended
        os.killpg(pid, signum)  # the group's id is the proxy's pid (start_new_session)


def _exited(pid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for the child ``pid`` to exit, without reaping it."""
    give_up = time.monotonic() + seconds
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.02)
    return True


def _listen() -> socket.socket:
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(16)
    return trap


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
