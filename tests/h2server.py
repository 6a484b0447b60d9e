"""An HTTP/2 event-stream server on 127.0.0.1 over TLS (ALPN ``h2``), built on the ``h2``
package's server side and :class:`~.rawserver.RawServer`'s bounded threads.

Each stream is answered by the scenario its path starts with (``/whole/...``,
``/silent/...``): a script of ``(delay, data)`` steps sent on that stream, so several
streams of one connection run side by side. The server writes down what it saw on each
connection (the streams it was asked for, each ``RST_STREAM`` with its error code, each
``PING``, the connection's end) so a test can check what reached the wire. Bounded: a
connection lives at most ``LIFETIME`` seconds and the server stops every thread.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import trustme

from .rawserver import RawServer

LIFETIME = 10.0  # no connection is served longer than this
END = b""  # a step that ends the stream (END_STREAM)


def chunk(n: int, finish: Optional[str] = None, pad: int = 0) -> bytes:
    """An OpenAI chat-completion chunk event (content ``str(n)``, padded to its size)."""
    delta = {} if finish else {"content": f"{n}" + "x" * pad}
    body = {
        "id": "chatcmpl-h2",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


FINISH = chunk(0, "stop") + b"data: [DONE]\n\n"
PING = b'event: ping\ndata: {"type": "ping"}\n\n'

Steps = List[Tuple[float, bytes]]
SCENARIOS: Dict[str, Callable[[], Steps]] = {
    "whole": lambda: [(0.0, chunk(1)), (0.0, chunk(2)), (0.0, FINISH), (0.0, END)],
    "silent": lambda: [],
    "stall": lambda: [(0.0, chunk(1))],
    "pings": lambda: [(0.0, chunk(1))] + [(0.1, PING)] * 60,
    "slow": lambda: [(0.05, chunk(n)) for n in range(1, 11)] + [(0.0, FINISH), (0.0, END)],
    "cut": lambda: [(0.0, chunk(1)), (0.0, END)],
    "huge": lambda: [(0.0, chunk(1, pad=4096)), (0.5, chunk(2))],
}


class H2Server:
    """The scenarios over HTTP/2 with TLS; ``log`` holds what each connection saw."""

    def __init__(self) -> None:
        self.authority = trustme.CA()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.authority.issue_cert("127.0.0.1").configure_cert(context)
        context.set_alpn_protocols(["h2"])
        self._raw = RawServer(self._serve, tls=context)
        self._lock = threading.Condition()
        self._connections = 0
        self.log: List[Tuple[int, str, int, object]] = []  # (connection, what, stream, detail)

    def __enter__(self) -> H2Server:
        self._raw.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.stop()

    def url(self, scenario: str) -> str:
        return f"https://127.0.0.1:{self._raw.port}/{scenario}"

    def client_context(self) -> ssl.SSLContext:
        """An SSL context that trusts the server's certificate."""
        context = ssl.create_default_context()
        self.authority.configure_trust(context)
        return context

    def seen(self, what: str) -> List[Tuple[int, int, object]]:
        with self._lock:
            return [(c, s, d) for c, w, s, d in self.log if w == what]

    def wait_for(self, what: str, count: int = 1, timeout: float = 3.0) -> bool:
        """Wait (bounded) until ``count`` entries ``what`` are logged."""
        with self._lock:
            return self._lock.wait_for(
                lambda: sum(w == what for _, w, _, _ in self.log) >= count, timeout
            )

    def _note(self, connection: int, what: str, stream: int = 0, detail: object = None) -> None:
        with self._lock:
            self.log.append((connection, what, stream, detail))
            self._lock.notify_all()

    def _serve(self, conn: socket.socket, stop: threading.Event) -> None:
        with self._lock:
            self._connections += 1
            number = self._connections
        assert isinstance(conn, ssl.SSLSocket) and conn.selected_alpn_protocol() == "h2"
        h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        h2c.initiate_connection()
        conn.sendall(h2c.data_to_send())
        scripts: Dict[int, Tuple[float, Steps]] = {}  # stream -> (next step's due time, steps)
        ends = time.monotonic() + LIFETIME
        why = "lifetime"
        while not stop.is_set() and time.monotonic() < ends:
            due = min((when for when, steps in scripts.values() if steps), default=ends)
            wait = max(0.0, min(due - time.monotonic(), 0.05))
            if conn.pending() or select.select([conn], [], [], wait)[0]:
                try:
                    data = conn.recv(65536)
                except (OSError, ssl.SSLError):
                    data = b""
                if not data:
                    why = "eof"
                    break
                try:
                    events = h2c.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    why = f"protocol error {exc!r}"
                    break
                if self._handle(number, h2c, events, scripts):
                    why = "goaway"
                    break
            self._send_due(h2c, scripts)
            out = h2c.data_to_send()
            if out:
                try:
                    conn.sendall(out)
                except OSError:
                    why = "eof"
                    break
        self._note(number, "closed", 0, why)

    def _handle(
        self,
        number: int,
        h2c: h2.connection.H2Connection,
        events: List[h2.events.Event],
        scripts: Dict[int, Tuple[float, Steps]],
    ) -> bool:
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = dict(event.headers or [])
                path = headers[b":path"].decode()
                self._note(number, "request", event.stream_id, path)
                h2c.send_headers(
                    event.stream_id,
                    [(":status", "200"), ("content-type", "text/event-stream")],
                )
                steps = SCENARIOS[path.split("/")[1]]()
                first = steps[0][0] if steps else 0.0
                scripts[event.stream_id] = (time.monotonic() + first, steps)
            elif isinstance(event, h2.events.DataReceived):
                h2c.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self._note(number, "reset", event.stream_id, event.error_code)
                scripts.pop(event.stream_id, None)
            elif isinstance(event, h2.events.PingReceived):
                self._note(number, "ping", 0, event.ping_data)
            elif isinstance(event, h2.events.ConnectionTerminated):
                return True
        return False

    @staticmethod
    def _send_due(h2c: h2.connection.H2Connection, scripts: Dict[int, Tuple[float, Steps]]) -> None:
        now = time.monotonic()
        for stream_id, (when, steps) in list(scripts.items()):
            while steps and when <= now:
                data = steps.pop(0)[1]
                if data == END:
                    h2c.end_stream(stream_id)
                else:
                    h2c.send_data(stream_id, data)
                when = now + (steps[0][0] if steps else 0.0)
            scripts[stream_id] = (when, steps)
            if not steps:
                del scripts[stream_id]
