"""Deadlines across a chain of WSGI services: what each hop saw, and when each ended.

1. Healthy chain: a caller with budget D sends ``deadline_headers`` to hop 1;
   each hop (wsgiref + ``DeadlineMiddleware``) spends S seconds, then calls the
   next with ``Session(propagate=True)``. Prints, per hop, the ``grpc-timeout``
   it received and its budget at entry, as a share of D, against what an
   ideal chain would have left (D - i*S).
2. Silent end: the same chain, the last hop calling a server that never
   answers. Prints, per hop and for the caller, how long after the caller's
   deadline it finished its answer, and with what status (median and max of
   the rounds).
3. gunicorn, one sync worker, ``--timeout 3``, a request blocked on a silent
   server: with ``DeadlineMiddleware(max_timeout=2)`` and without it (what
   the client sees, and whether the worker was killed).

Run: ``python benchmarks/propagate_chain.py`` (about 40 s; loopback only; stops by itself).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Tuple

import requests

import watchdog_sync as ws
from watchdog_sync.wsgi import DeadlineMiddleware

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.wsgiservers import gunicorn_server, wsgiref_server

ENDED: Dict[str, List[Tuple[str, float]]] = {}  # round -> (hop, finished at)
_lock = threading.Lock()


def hop_app(name: str, spend: float) -> Any:
    def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", "")))
        left = ws.current_budget().remaining()
        record = {"hop": name, "header": environ.get("HTTP_GRPC_TIMEOUT"), "left": left}
        ws.current_budget().sleep(spend)
        chain: List[Any] = [record]
        status = "200 OK"
        if query.get("next"):
            rest = query["next"].split(",")
            forward = {"next": ",".join(rest[1:]), "round": query.get("round", "")}
            url = rest[0] + "?" + urllib.parse.urlencode(forward)
            with ws.Session(propagate=True) as session:
                answer = session.get(url)
            if answer.status_code == 200:
                chain.extend(answer.json())
            else:
                status = f"{answer.status_code} from downstream"
                chain.append({"status": answer.status_code})
        body = json.dumps(chain).encode()
        start_response(status.replace(" from downstream", " Downstream"), [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body)))
        ])  # fmt: skip
        return [body]

    return app


class Recorded:
    """Notes when the wrapped app's answer was finished (its body closed)."""

    def __init__(self, name: str, app: Any) -> None:
        self.name, self.app = name, app

    def __call__(self, environ: Dict[str, Any], start_response: Any) -> Any:
        key = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""))).get("round", "")
        result = self.app(environ, start_response)
        try:
            yield from result
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
            with _lock:
                ENDED.setdefault(key, []).append((self.name, time.monotonic()))


def silent_server() -> Tuple[str, Any]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    stop = threading.Event()
    held: List[socket.socket] = []

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, name="silent")
    thread.start()

    def close() -> None:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()

    return f"http://127.0.0.1:{listener.getsockname()[1]}/", close


@contextlib.contextmanager
def chain(hops: int, spend: float) -> Iterator[List[str]]:
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(
                wsgiref_server(
                    Recorded(f"hop{i + 1}", DeadlineMiddleware(hop_app(f"hop{i + 1}", spend)))
                )
            )
            for i in range(hops)
        ]
        yield urls


def first_url(urls: List[str], tail: Optional[str], key: str = "") -> str:
    rest = urls[1:] + ([tail] if tail else [])
    return urls[0] + "/?" + urllib.parse.urlencode({"next": ",".join(rest), "round": key})


def grpc_seconds(value: Optional[str]) -> Optional[float]:
    found = ws.budget_from_headers({"grpc-timeout": value}) if value else None
    return None if found is None or found.deadline is None else found.deadline - found.started


def healthy(hops: int, budget: float, spend: float, rounds: int) -> None:
    print(
        f"\n1. healthy chain: {hops} hops, caller budget D = {budget:.1f} s, each hop spends {spend:.2f} s"
    )
    seen: Dict[str, List[Tuple[float, float]]] = {}
    with chain(hops, spend) as urls:
        for _ in range(rounds):
            answer = requests.get(
                first_url(urls, None), headers=ws.deadline_headers(ws.Budget(budget)), timeout=30
            )
            for record in answer.json():
                header = grpc_seconds(record["header"])
                seen.setdefault(record["hop"], []).append((header or 0.0, record["left"]))
    print(
        f"{'hop':<6} {'ideal D - i*S':>14} {'header (median)':>16} {'budget at entry':>16} {'share of D':>11} {'lost vs ideal':>14}"
    )
    for index, (hop, values) in enumerate(sorted(seen.items())):
        ideal = budget - index * spend
        header = statistics.median(v[0] for v in values)
        left = statistics.median(v[1] for v in values)
        print(
            f"{hop:<6} {ideal:>13.3f}s {header:>15.3f}s {left:>15.3f}s {left / budget:>10.1%} {1000 * (ideal - left):>11.1f} ms"
        )


def silent_end(hops: int, budget: float, spend: float, rounds: int) -> None:
    print(
        f"\n2. silent end: {hops} hops then a silent server, D = {budget:.1f} s, each hop spends {spend:.2f} s"
    )
    lateness: Dict[str, List[float]] = {}
    statuses: Dict[str, List[int]] = {}
    deadlines: Dict[str, float] = {}
    tail, close = silent_server()
    try:
        with chain(hops, spend) as urls:
            for index in range(rounds):
                key = f"r{index}"
                headers = ws.deadline_headers(ws.Budget(budget))
                started = time.monotonic()
                answer = requests.get(first_url(urls, tail, key), headers=headers, timeout=30)
                deadlines[key] = started + budget
                lateness.setdefault("caller", []).append(time.monotonic() - deadlines[key])
                statuses.setdefault("caller", []).append(answer.status_code)
        # Leaving the chain waited for every hop's last request: all have ended now.
        for key, deadline_at in deadlines.items():
            for hop, at in ENDED.get(key, []):
                lateness.setdefault(hop, []).append(at - deadline_at)
    finally:
        close()
    print(f"{'who':<7} {'after the deadline: median':>27} {'max':>9}   statuses")
    for who in [f"hop{i}" for i in range(hops, 0, -1)] + ["caller"]:
        values = lateness.get(who, [])
        extra = f"   {sorted(set(statuses[who]))}" if who in statuses else ""
        print(
            f"{who:<7} {1000 * statistics.median(values):>24.1f} ms {1000 * max(values):>6.1f} ms{extra}"
        )


def gunicorn_worker(rounds: int) -> None:
    print("\n3. gunicorn, 1 sync worker, --timeout 3, the request blocked on a silent server")
    tail, close = silent_server()
    try:
        for label, env in (
            ("DeadlineMiddleware(max_timeout=2)", {"WS_TEST_MAX_TIMEOUT": "2"}),
            ("DeadlineMiddleware() (no limit)", {}),
        ):
            with gunicorn_server(timeout=3, env=env) as server:
                for _ in range(rounds):
                    worker = server.worker_pid()
                    started = time.monotonic()
                    try:
                        answer = requests.get(
                            f"{server.url}/chain", params={"to": tail}, timeout=30
                        )
                        kind = answer.headers.get("Content-Type", "")
                        shown = answer.text if kind == "application/json" else kind
                        outcome = f"HTTP {answer.status_code} {shown}"
                    except requests.RequestException as exc:
                        outcome = f"{type(exc).__name__} (no answer)"
                    took = time.monotonic() - started
                    killed = server.worker_pid() != worker
                    print(f"{label:<34} {took:5.2f} s  {outcome:<70} worker killed: {killed}")
                print(
                    f"{'':<34} log lines with WORKER TIMEOUT: {server.log().count('WORKER TIMEOUT')}"
                )
    finally:
        close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hops", type=int, default=3)
    parser.add_argument("--budget", type=float, default=2.0)
    parser.add_argument("--spend", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(
        f"watchdog-sync {ws.__version__}, Python {sys.version.split()[0]}, requests {requests.__version__}"
    )
    healthy(args.hops, args.budget, args.spend, args.rounds)
    silent_end(args.hops, args.budget, args.spend, args.rounds)
    gunicorn_worker(2)


if __name__ == "__main__":
    main()
