"""The ``watchdog-sync`` command."""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
import time
from types import FrameType
from typing import List, Optional

from ._errors import DeadlineExceeded
from ._scope import current_budget, deadline
from .testing import FaultGateway

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    print("A legacy loop that swallows every Exception, run inside deadline(1.0):")
    started = time.monotonic()
    swallowed = 0
    try:
        with deadline(1.0, stage="legacy-loop"):
            while True:
                try:
                    current_budget().sleep(10)
                except Exception:
                    swallowed += 1
    except DeadlineExceeded as exc:
        print(f"  stopped after {time.monotonic() - started:.2f}s: {exc}")
        print(f"  exceptions the loop swallowed: {swallowed}")
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _gateway(args: argparse.Namespace) -> int:
    def fail(message: str) -> int:
        print(f"watchdog-sync gateway: error: {message}", file=sys.stderr)
        return 2

    if not _is_loopback(args.host) and not args.allow_remote:
        return fail(
            f"--host {args.host} is not a loopback address; "
            "pass --allow-remote to serve other machines"
        )
    if not 0 <= args.port <= 65535:
        return fail(f"--port must be between 0 and 65535, got {args.port}")
    try:
        gateway = FaultGateway(args.host, args.port, certfile=args.certfile, keyfile=args.keyfile)
        gateway.start()
    except (OSError, ValueError) as exc:
        return fail(f"cannot serve on {args.host}:{args.port}: {exc}")
    stop = threading.Event()

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"FaultGateway on {gateway.url} (Ctrl-C to stop)", flush=True)
        print("POST {base_url}/chat/completions; one base_url per scenario:", flush=True)
        for name, summary in FaultGateway.scenarios().items():
            print(f"  {name:<22} {gateway.base_url(name)}  # {summary}", flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        gateway.stop()
    print("FaultGateway stopped", flush=True)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="watchdog-sync", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="show what watchdog_sync saves you from")
    demo.set_defaults(run=_demo)
    gateway = commands.add_parser(
        "gateway",
        help="run the FaultGateway, a misbehaving OpenAI-compatible server, in the foreground",
        description="Run the FaultGateway in the foreground and print one base URL per "
        "scenario; Ctrl-C (SIGINT) or SIGTERM stops it.",
    )
    gateway.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    gateway.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    gateway.add_argument(
        "--allow-remote", action="store_true", help="allow a --host that is not loopback"
    )
    gateway.add_argument("--certfile", help="PEM certificate chain: serve HTTPS")
    gateway.add_argument("--keyfile", help="PEM private key, if not inside --certfile")
    gateway.set_defaults(run=_gateway)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
