"""What one stream's open costs: stream_sse beside requests + sseclient-py, side by side.

Usage: python benchmarks/open_cost.py [--opens 300] [--rounds 6] [--syscalls] [--live 0]

A local server (its own process, so it does not compete for the GIL) answers each
request on 127.0.0.1 with a two-event stream. Each round opens ``--opens`` streams in a
row with each client, alternating, as ``scale.py``'s callers do (plain with
``timeout=(10, 30)``, ``stream_sse`` inside ``deadline(180)``), and reads them to their
end; it prints the CPU per open (min and median of the rounds) and their ratio.

``--syscalls`` also runs each client under ``strace -f`` (when it is installed) and counts,
per open, the system calls that let the GIL go and so, with many threads, wait for it
again: ``ioctl(FIONBIO)`` (every ``settimeout()``), ``poll``, ``connect``, ``sendto``,
``recvfrom``. With 100 threads opening at once each one is a turn in the GIL's queue.

``--live N`` also holds N streams of each client open after their first event (from a
server in its own process, whose streams last 50 s) and counts the objects the cyclic
GC tracks per open stream: while many streams open at once, their objects are what each
collection walks (``stream_sse`` each inside a ``deadline()`` of its own, as above).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List

import requests
import sseclient
from _chunked_server import HEAD, chunk, running
from _scale_server import EventServer, serving

import watchdog_sync as ws

_BODY = chunk(b'data: {"a":1}\n\n') + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
_COUNTED = ("ioctl", "poll", "connect", "sendto", "recvfrom")
_STRACE_SECONDS = 120.0


def _answer(conn: socket.socket, request: bytes, events: int) -> None:
    conn.sendall(HEAD + _BODY)


def _plain(url: str) -> int:
    with requests.post(url, json={}, stream=True, timeout=(10, 30)) as response:
        return sum(1 for _ in sseclient.SSEClient(response).events())


def _guarded(url: str) -> int:
    with ws.deadline(180), ws.stream_sse(url, json={}, idle_timeout=30) as stream:
        return sum(1 for _ in stream)


_CLIENTS: Dict[str, Callable[[str], int]] = {
    "requests + sseclient-py": _plain,
    "stream_sse": _guarded,
}


def _hold_plain(url: str, scopes: contextlib.ExitStack) -> Callable[[], None]:
    response = requests.post(url, json={}, stream=True, timeout=(10, 30))
    next(sseclient.SSEClient(response).events())
    return response.close


def _hold_guarded(url: str, scopes: contextlib.ExitStack) -> Callable[[], None]:
    scopes.enter_context(ws.deadline(180))
    stream = ws.stream_sse(url, json={}, idle_timeout=30)
    next(stream)
    return stream.close


_HOLDERS = {"requests + sseclient-py": _hold_plain, "stream_sse": _hold_guarded}


def _live_event(index: int) -> bytes:
    payload = b'data: {"i":%d}\n\n' % index
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _tracked_per_stream(streams: int) -> Dict[str, float]:
    """GC-tracked objects per open stream, ``streams`` of each client held at once."""
    tracked: Dict[str, float] = {}
    with serving(lambda listener: EventServer(listener, 1000, 0.05, _live_event), streams) as url:
        for name, hold in _HOLDERS.items():
            with contextlib.ExitStack() as scopes:
                closes = [hold(url, scopes)]  # imports and first-call work out of the count
                gc.collect()
                before = len(gc.get_objects())
                closes += [hold(url, scopes) for _ in range(streams)]
                gc.collect()
                tracked[name] = (len(gc.get_objects()) - before) / streams
                for close in closes:
                    close()
    return tracked


def _cpu_per_open(fn: Callable[[str], int], url: str, opens: int) -> float:
    started = time.process_time()
    for _ in range(opens):
        if fn(url) != 2:
            raise SystemExit("a stream did not give its two events")
    return (time.process_time() - started) / opens * 1e6


def _syscalls(name: str, url: str, opens: int) -> Dict[str, float]:
    """Per open, from ``strace -f`` of a fresh process that opens ``opens`` streams after
    one to warm up (the calls before the marker it writes are left out)."""
    command = [
        "strace", "-f", "-qq", "-e", "trace=" + ",".join((*_COUNTED, "write")),
        sys.executable, __file__, "--strace-child", name, url, str(opens),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=_STRACE_SECONDS)
    lines = done.stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if "open-cost-marker" in line), None)
    if start is None:
        raise SystemExit(f"strace gave no marker for {name}: {done.stderr[-500:]}")
    counts: Dict[str, int] = collections.Counter()
    for line in lines[start + 1 :]:
        match = re.match(r"(?:\[pid\s+\d+\] )?(\w+)\(", line)
        if match is None or match.group(1) not in _COUNTED:
            continue
        call = match.group(1)
        if call == "ioctl":
            if "FIONBIO" not in line:
                continue
            call = "ioctl(FIONBIO)"
        counts[call] += 1
    return {call: count / opens for call, count in counts.items()}


def _strace_child(name: str, url: str, opens: int) -> None:
    fn = _CLIENTS[name]
    fn(url)
    os.write(1, b"open-cost-marker\n")
    for _ in range(opens):
        fn(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opens", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--syscalls", action="store_true")
    parser.add_argument("--live", type=int, default=0)
    parser.add_argument("--strace-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.strace_child:
        name, url, opens = args.strace_child
        _strace_child(name, url, int(opens))
        return
    with running(_answer, 0, seconds=600.0) as (host, port):
        url = f"http://{host}:{port}/v1/chat"
        cpu: Dict[str, List[float]] = {name: [] for name in _CLIENTS}
        for fn in _CLIENTS.values():
            fn(url)  # imports and first-call work out of the figures
        for _ in range(args.rounds):
            for name, fn in _CLIENTS.items():
                cpu[name].append(_cpu_per_open(fn, url, args.opens))
        print(f"{args.opens} opens in a row per round, {args.rounds} rounds, CPU per open (µs)\n")
        print("| client | min | median | ratio (median) |")
        print("| --- | --- | --- | --- |")
        base = statistics.median(cpu["requests + sseclient-py"])
        for name, values in cpu.items():
            median = statistics.median(values)
            print(f"| {name} | {min(values):.0f} | {median:.0f} | {median / base:.2f} |")
        if args.syscalls:
            _print_syscalls(url)
    if args.live:
        tracked = _tracked_per_stream(args.live)
        print(f"\nObjects the cyclic GC tracks per open stream ({args.live} held open at once)\n")
        print("| client | objects | ratio |")
        print("| --- | --- | --- |")
        for name, count in tracked.items():
            ratio = count / tracked["requests + sseclient-py"]
            print(f"| {name} | {count:.1f} | {ratio:.2f} |")


def _print_syscalls(url: str) -> None:
    if shutil.which("strace") is None:
        print("\n(strace is not installed: no system-call counts)")
        return
    print("\nSystem calls per open that let the GIL go (strace -f, 100 opens)\n")
    counted = {name: _syscalls(name, url, 100) for name in _CLIENTS}
    calls = sorted({call for counts in counted.values() for call in counts})
    print("| client | " + " | ".join(calls) + " | all |")
    print("| --- |" + " --- |" * (len(calls) + 1))
    for name, counts in counted.items():
        cells = " | ".join(f"{counts.get(call, 0.0):.1f}" for call in calls)
        print(f"| {name} | {cells} | {sum(counts.values()):.1f} |")


if __name__ == "__main__":
    main()
