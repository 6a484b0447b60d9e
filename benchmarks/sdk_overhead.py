"""The openai SDK's stream, unguarded vs on httpx_client(), side by side in one run.

Usage: python benchmarks/sdk_overhead.py [--events 20000] [--rounds 7] [--deadlines 20]

A local server (its own process, so it does not compete for the GIL) sends
``--events`` chat completion chunks on 127.0.0.1, each its own HTTP chunk, then
the finish chunk and ``[DONE]``. Prints chunks/s of (a) ``openai.OpenAI()`` on
its default httpx2 client and (b) ``openai.OpenAI(http_client=httpx_client())``,
and their ratio (median over ``--rounds`` alternating runs); then, over
``--deadlines`` calls to a server that drips a chunk every 50 ms forever, how far
past a 0.5 s ``deadline()`` the SDK call ended (median and max).
Needs the SDK: ``pip install -e ".[dev]"``.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from typing import Any, List, Tuple

import openai
from _chunked_server import HEAD, chunk, running

import watchdog_sync as ws

_CHUNK_JSON = (
    b'{"id":"c","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}'
)
_FINISH_JSON = (
    b'{"id":"c","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
)


def _chunk(payload: bytes) -> bytes:
    return chunk(b"data: " + payload + b"\n\n")


_TAIL = _chunk(_FINISH_JSON) + _chunk(b"[DONE]") + b"0\r\n\r\n"


def _answer(conn: socket.socket, request: bytes, events: int) -> None:
    conn.sendall(HEAD)
    if b"/drip/" in request.split(b"\r\n", 1)[0]:
        conn.settimeout(0.05)
        for _ in range(2000):  # 100 s at most; the client leaves at its deadline
            conn.sendall(_chunk(_CHUNK_JSON))
            try:
                if conn.recv(65536) == b"":
                    return
            except socket.timeout:
                continue
        return
    batch = _chunk(_CHUNK_JSON) * 50
    for _ in range(events // 50):
        conn.sendall(batch)
    conn.sendall(_TAIL)


def _count(client: openai.OpenAI) -> int:
    count = 0
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    for piece in stream:
        if piece.choices and piece.choices[0].delta.content:
            count += 1
    return count


def _timed(client: openai.OpenAI, events: int) -> float:
    started = time.perf_counter()
    got = _count(client)
    elapsed = time.perf_counter() - started
    assert got == events, f"read {got} of {events} chunks"
    return events / elapsed


def _paired(base: str, events: int, rounds: int) -> Tuple[List[float], List[float]]:
    """Alternate the two clients so machine noise hits both alike."""
    plain_client = openai.OpenAI(base_url=base, api_key="sk-bench", max_retries=0)
    guarded_client = openai.OpenAI(
        base_url=base, api_key="sk-bench", max_retries=0, http_client=ws.httpx_client()
    )
    plain: List[float] = []
    guarded: List[float] = []
    try:
        for _ in range(rounds):
            plain.append(_timed(plain_client, events))
            with ws.deadline(600):
                guarded.append(_timed(guarded_client, events))
    finally:
        plain_client.close()
        guarded_client.close()
    return plain, guarded


def _overshoots(base: str, count: int, seconds: float) -> List[float]:
    client = openai.OpenAI(
        base_url=base + "/drip", api_key="sk-bench", max_retries=0, http_client=ws.httpx_client()
    )
    past: List[float] = []
    try:
        for _ in range(count):
            started = time.monotonic()
            try:
                with ws.deadline(seconds):
                    _count(client)
            except ws.DeadlineExceeded:
                past.append(time.monotonic() - started - seconds)
    finally:
        client.close()
    return past


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--deadlines", type=int, default=20)
    args: Any = parser.parse_args()
    with running(_answer, args.events) as (host, port):
        base = f"http://{host}:{port}/v1"
        plain, guarded = _paired(base, args.events, args.rounds)
        ratios = [g / p for p, g in zip(plain, guarded)]
        print(f"chunks per run: {args.events}, {args.rounds} alternating rounds")
        print(f"(a) openai SDK, default client:   median {statistics.median(plain):,.0f} chunks/s")
        print(
            f"(b) openai SDK + httpx_client():  median {statistics.median(guarded):,.0f} chunks/s"
        )
        print(
            f"ratio (b)/(a): median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )
        past = _overshoots(base, args.deadlines, 0.5)
        print(
            f"deadline 0.5 s over a dripping stream, {len(past)} of {args.deadlines} calls ended "
            f"by DeadlineExceeded: past the deadline median {statistics.median(past) * 1000:.1f} ms, "
            f"max {max(past) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
