"""The cost of instrument() outside and inside a deadline() scope, side by side in one run.

Usage: python benchmarks/instrument_overhead.py [--calls 500] [--rounds 21] [--chunks 20000]

A local keep-alive server (_chunked_server.py's, its own process, so it does not
compete for the GIL) answers on 127.0.0.1. Three workloads, each timed (a) without
instrument(), (b) with instrument() but outside any scope, (c) with
instrument() inside ``deadline(60)``; the three alternate in every round so
machine noise hits them alike. Prints the median and the best round per call
(or per chunk), and their ratios to (a): on a shared machine the best round
is the steadier measure of a small fixed cost. Three more modes, the options on:
(d) ``instrument(request_timeout=60)`` outside any scope (each request has a
timer of its own), (e) ``instrument(request_timeout=60, sockets=True,
threads=True)`` inside ``deadline(60)``, (f) ``instrument(idle_timeout=60)``
outside any scope (every event stream read by the stream rules).

* ``requests``: ``requests.Session().get`` of a 2-byte answer, ``--calls`` times;
* ``urllib3``: ``PoolManager.request`` of the same, ``--calls`` times;
* ``httpx2``: ``httpx2.Client().get`` of the same, ``--calls`` times (the
  transport the openai and anthropic SDKs send through);
* ``stream``: one ``iter_content(None)`` over a body of ``--chunks`` HTTP chunks;
* ``events``: the same body as an event stream (``text/event-stream``, ending in a
  ``finish_reason`` and ``data: [DONE]``), each chunk one event: what (f) guards.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import time
from typing import Any, Callable, Dict, Iterator, List

import requests
import urllib3
from _chunked_server import chunk, read_request, running

import watchdog_sync as ws

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
_PIECE = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n'
_CHUNK = chunk(_PIECE)
_DONE = chunk(b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


def _answer(conn: socket.socket, head: bytes, chunks: int) -> None:
    """Every request on the kept-alive connection, until the client closes it."""
    conn.settimeout(10)
    while head:
        path = head.split(b" ", 2)[1]
        if path.startswith((b"/stream", b"/events")):
            events = path.startswith(b"/events")
            kind = b"Content-Type: text/event-stream\r\n" if events else b""
            conn.sendall(b"HTTP/1.1 200 OK\r\n" + kind + b"Transfer-Encoding: chunked\r\n\r\n")
            batch = _CHUNK * 100
            for _ in range(chunks // 100):
                conn.sendall(batch)
            conn.sendall((_DONE if events else b"") + b"0\r\n\r\n")
        else:
            conn.sendall(_OK)
        head = read_request(conn)


def _session_calls(base: str, calls: int) -> float:
    with requests.Session() as session:
        session.get(base)  # the connection is open before timing starts
        started = time.perf_counter()
        for _ in range(calls):
            session.get(base)
        return (time.perf_counter() - started) / calls


def _urllib3_calls(base: str, calls: int) -> float:
    with urllib3.PoolManager() as manager:
        manager.request("GET", base)
        started = time.perf_counter()
        for _ in range(calls):
            manager.request("GET", base)
        return (time.perf_counter() - started) / calls


def _httpx2_calls(base: str, calls: int) -> float:
    import httpx2  # a bench dependency (the httpx extra)

    with httpx2.Client() as client:
        client.get(base)
        started = time.perf_counter()
        for _ in range(calls):
            client.get(base)
        return (time.perf_counter() - started) / calls


def _stream(base: str, chunks: int, path: str = "/stream") -> float:
    with requests.Session() as session:
        session.get(base)
        started = time.perf_counter()
        with session.get(base + path, stream=True) as response:
            size = sum(len(piece) for piece in response.iter_content(None))
        assert size >= len(_PIECE) * (chunks // 100) * 100, size
        return (time.perf_counter() - started) / chunks


@contextlib.contextmanager
def _mode(name: str) -> Iterator[None]:
    if name == "plain":
        yield
        return
    options: Dict[str, Any] = {}
    if name.startswith("request_timeout"):
        options["request_timeout"] = 60
    if name == "all options in scope":
        options.update(request_timeout=60, sockets=True, threads=True)
    if name == "idle_timeout":
        options["idle_timeout"] = 60
    undo = ws.instrument(**options)
    try:
        if name.endswith("in scope"):
            with ws.deadline(60):
                yield
        else:
            yield
    finally:
        undo()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--chunks", type=int, default=20000)
    args = parser.parse_args()
    with running(_answer, args.chunks) as (host, port):
        base = f"http://{host}:{port}"
        workloads: Dict[str, Callable[[], float]] = {
            "requests": lambda: _session_calls(base, args.calls),
            "urllib3": lambda: _urllib3_calls(base, args.calls),
            "httpx2": lambda: _httpx2_calls(base, args.calls),
            "stream": lambda: _stream(base, args.chunks),
            "events": lambda: _stream(base, args.chunks, "/events"),
        }
        modes = (
            "plain",
            "outside a scope",
            "in scope",
            "request_timeout",
            "all options in scope",
            "idle_timeout",
        )
        results: Dict[str, Dict[str, List[float]]] = {w: {m: [] for m in modes} for w in workloads}
        for _ in range(args.rounds):
            for workload, run in workloads.items():
                for mode in modes:
                    with _mode(mode):
                        results[workload][mode].append(run())
    print(f"{'workload':<10} {'mode':<21} {'median':>17} {'ratio':>6} {'best':>17} {'ratio':>6}")
    for workload, by_mode in results.items():
        unit = "us/chunk" if workload in ("stream", "events") else "us/call"
        plain, plain_best = statistics.median(by_mode["plain"]), min(by_mode["plain"])
        for mode in modes:
            median, best = statistics.median(by_mode[mode]), min(by_mode[mode])
            print(
                f"{workload:<10} {mode:<21} {median * 1e6:>8.2f} {unit} {median / plain:>6.3f} "
                f"{best * 1e6:>8.2f} {unit} {best / plain_best:>6.3f}"
            )


if __name__ == "__main__":
    main()
