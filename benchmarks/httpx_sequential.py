"""Sequential event streams on one client: time per call and connections opened.

Usage: python benchmarks/httpx_sequential.py [--calls 60] [--rounds 3]

A raw-socket server on 127.0.0.1 (TCP, and TLS with a trustme certificate) answers
every request on its connection with a one-event chunked ``text/event-stream`` body,
the last chunk in the same segment, as long as the client keeps the connection. One
client makes ``--calls`` streaming calls in a row, each read to its end, with
``httpx2.Client()`` and with ``watchdog_sync.httpx_client()`` (inside ``deadline()``);
the table gives the median time per call over ``--rounds`` rounds and the connections
the server accepted. Loopback only; every socket has a timeout and the server stops
with the run.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import statistics
import threading
import time
from typing import Any, List, Optional

import httpx2
import trustme

import watchdog_sync as ws

_EVENT = b'data: {"n": 0}\n\n'
_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n0\r\n\r\n" % (len(_EVENT), _EVENT)
)


class _Server:
    def __init__(self, tls: Optional[ssl.SSLContext]) -> None:
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._stop = threading.Event()
        self.accepted = 0
        self._threads: List[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self._listener.getsockname()[1]}/"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            data = b""
            while not self._stop.is_set():
                while b"\r\n\r\n" not in data:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    data += piece
                head, data = data.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(data) < length:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    data += piece
                data = data[length:]
                conn.sendall(_ANSWER)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)
        self._listener.close()


def _calls(client: Any, url: str, calls: int, guarded: bool) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        if guarded:
            with ws.deadline(30), client.stream("POST", url, json={"stream": True}) as r:
                body = b"".join(r.iter_bytes())
        else:
            with client.stream("POST", url, json={"stream": True}) as r:
                body = b"".join(r.iter_bytes())
        assert body == _EVENT, body
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    print(f"{args.calls} sequential one-event streams per client; median of {args.rounds} rounds")
    print()
    print("| transport | client | ms per call | connections accepted |")
    print("| --- | --- | --- | --- |")
    for name, tls in (("TCP", None), ("TLS", server_context)):
        for label, guarded in (("httpx2.Client()", False), ("httpx_client()", True)):
            times: List[float] = []
            accepted: List[int] = []
            for _ in range(args.rounds):
                server = _Server(tls)
                make = ws.httpx_client if guarded else httpx2.Client
                client = make(verify=client_context) if tls else make()
                try:
                    with client:
                        times.append(_calls(client, server.url, args.calls, guarded))
                finally:
                    server.close()
                accepted.append(server.accepted)
            print(
                f"| {name} | {label} | {statistics.median(times) * 1000:.2f} | {max(accepted)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
