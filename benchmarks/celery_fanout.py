"""A Celery fan-out against a silent dependency, with and without watchdog_sync.celery.install.

200 tasks are sent at once, each inside its own short deadline (``deadline(0.5)``), to 2
worker processes (``--pool=prefork -c 1`` each) on a real redis-server on 127.0.0.1. Each
task GETs a raw socket server that accepts and never answers, with a local timeout of
0.5 s (a fresh full timeout per hop, as legacy code passes it). Printed per mode:

* how many tasks ended more than 100 ms after their caller's deadline (the backend's
  ``date_done`` against the deadline on the wall clock), with how late those that ran
  ended (median, max; negative: before the deadline);
* how many were never started (Celery's ``expires``: the caller had already given up);
* slots freed per second: tasks settled / seconds from the first send to the last outcome.

Run: ``python benchmarks/celery_fanout.py`` (about 1 minute; redis-server must be on PATH;
stops by itself: every worker and server is reaped at the end).
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from integration.celeryprocs import RedisServer, Worker  # noqa: E402 - needs ROOT on sys.path
from tests.rawserver import RawServer, wait_for_disconnect  # noqa: E402
from watchdog_sync import deadline  # noqa: E402
from watchdog_sync.celery import install  # noqa: E402

_OUTCOME_SECONDS = 120.0


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    wait_for_disconnect(conn, stop, limit=30.0)


def _wall(moment: Any) -> float:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return float(moment.timestamp())


def run(module: Any, root: pathlib.Path, *, installed: bool, args: argparse.Namespace) -> None:
    queue = f"wdsync-fanout-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, WATCHDOG_SYNC_TEST_CELERY_INSTALL="1" if installed else "0")
    undo = install(module.app, margin=module.MARGIN) if installed else None
    workers: List[Worker] = []
    try:
        with RawServer(_silent, max_connections=args.tasks + 8) as silent:
            for index in range(2):
                workers.append(
                    Worker(module.app, env, root / f"worker-{installed}-{index}.log",
                           queues=[queue], concurrency=1)
                )  # fmt: skip
            sent: List[Dict[str, Any]] = []
            first = time.monotonic()
            for _ in range(args.tasks):
                with deadline(args.deadline):
                    caller_deadline = time.time() + args.deadline
                    result = module.fetch.apply_async(
                        (silent.url,), {"timeout": args.call_timeout}, queue=queue
                    )
                sent.append({"result": result, "deadline": caller_deadline})
            for item in sent:
                item["result"].get(timeout=_OUTCOME_SECONDS, propagate=False)
            seconds = time.monotonic() - first
            lateness: List[float] = []
            not_started = 0
            for item in sent:
                result = item["result"]
                if result.state == "REVOKED":
                    not_started += 1
                    continue
                lateness.append(_wall(result.date_done) - item["deadline"])
    finally:
        for worker in workers:
            worker.stop()
        if undo is not None:
            undo()
    ran = args.tasks - not_started
    label = "with install" if installed else "without install"
    late = sum(1 for value in lateness if value > args.tolerance)
    spread = (
        f"end - deadline: median {statistics.median(lateness) * 1000:+.0f} ms, "
        f"max {max(lateness) * 1000:+.0f} ms"
        if lateness
        else "none ran"
    )
    print(
        f"{label}: {ran}/{args.tasks} ran, {late} ended more than {args.tolerance * 1000:.0f} ms "
        f"after their caller's deadline ({spread}); {not_started} not started (expired); "
        f"{seconds:.1f} s, {args.tasks / seconds:.1f} slots freed/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--deadline", type=float, default=0.5, help="each caller's deadline (s)")
    parser.add_argument("--call-timeout", type=float, default=0.5, help="the task's local timeout")
    parser.add_argument(
        "--tolerance", type=float, default=0.1, help="how late still counts as on time (s)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wdsync-fanout-") as tmp:
        root = pathlib.Path(tmp)
        redis = RedisServer(root)
        try:
            os.environ["WATCHDOG_SYNC_TEST_REDIS_URL"] = redis.url
            os.environ["WATCHDOG_SYNC_TEST_CELERY_INSTALL"] = "0"
            import integration.celery_app as module

            for installed in (False, True):
                run(module, root, installed=installed, args=args)
            module.app.close()
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
