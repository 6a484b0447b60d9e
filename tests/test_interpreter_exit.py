"""A process exits while a stream is open: at interpreter exit no thread can start (one
started then never runs, and ``Thread.start`` waits for it for ever), so a stream finalized
then ends its connection in the finalizing thread, and the process ends."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time
from typing import List

import pytest

from .rawserver import (
    RawServer,
    read_request_head,
    send_body_piece,
    send_sse_head,
    wait_for_disconnect,
)

pytestmark = pytest.mark.timeout(60)

_EXIT_LIMIT = 20.0  # seconds a child may take: a hang is the failure, not the time

_OPEN = {
    "stream_sse": """
        import watchdog_sync as ws
        stream = ws.stream_sse(URL, idle_timeout=30)
        events = iter(stream)
        print(next(events).data, flush=True)
    """,
    "ChatClient": """
        import watchdog_sync as ws
        client = ws.ChatClient(URL, "key", model="m", idle_timeout=30)
        stream = client.stream([{"role": "user", "content": "hi"}])
        events = iter(stream)
        print(next(events)["choices"][0]["delta"]["content"], flush=True)
    """,
    "httpx_client": """
        import watchdog_sync as ws
        client = ws.httpx_client(idle_timeout=30)
        response = client.send(client.build_request("POST", URL), stream=True)
        lines = response.iter_lines()
        print(next(lines), flush=True)
    """,
}

# Where the open stream is when the interpreter exits: a module's global (finalized when the
# module's globals are cleared), or a reference cycle (finalized by the last collection).
_LEFT = {
    "in_a_global": "",
    "in_a_cycle": """
        class Holder:
            pass
        holder = Holder()
        holder.itself = holder
        holder.parts = [globals().pop(name) for name in NAMES if name in globals()]
        del holder
    """,
}


_NAMES = ("stream", "events", "client", "response", "lines")  # what the scripts above open


def _serve_one_event(disconnects: List[float]) -> RawServer:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        read_request_head(conn)
        send_sse_head(conn)
        send_body_piece(conn, b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n')
        if wait_for_disconnect(conn, stop):
            disconnects.append(time.monotonic())

    return RawServer(handler)


@pytest.mark.parametrize("left", sorted(_LEFT))
@pytest.mark.parametrize("client", sorted(_OPEN))
def test_a_process_exits_at_once_with_a_stream_left_open(client: str, left: str) -> None:
    disconnects: List[float] = []
    with _serve_one_event(disconnects) as server:
        script = f"URL = {server.url!r}\nNAMES = {_NAMES!r}\n" + textwrap.dedent(_OPEN[client])
        script += textwrap.dedent(_LEFT[left]) + 'print("exiting", flush=True)\n'
        try:
            done = subprocess.run(
                [sys.executable, "-c", script],
                capture_output=True,
                text=True,
                timeout=_EXIT_LIMIT,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the process did not exit within {_EXIT_LIMIT:g} s: {exc.stdout!r}")
        limit = time.monotonic() + 2
        while not disconnects and time.monotonic() < limit:
            time.sleep(0.01)  # wait for the server to observe the close (the subject)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "exiting"
    assert disconnects, "the server never saw the connection close"
