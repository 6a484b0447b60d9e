"""The ``watchdog-sync`` command."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import sys
import threading
from types import FrameType
from typing import List, Optional

from .._core.config import IDLE_TIMEOUT_UNSET, TIMEOUT_UNSET, Unset, origin
from .._core.errors import WatchdogError
from .._core.redact import safe_url
from ..testing import FaultGateway
from .probe import ProbeReport
from .probe import probe as run_probe
from .run import add_run_command

__all__ = ["main"]

# --help is read as plain text: no reStructuredText markup.
_DESCRIPTION = (
    "watchdog-sync: see what watchdog_sync saves you from (demo), run a server that "
    "misbehaves on purpose in the OpenAI, Anthropic and Gemini APIs (gateway), and time a "
    "real streaming endpoint (probe)."
)
_APIS = (
    ("OpenAI", "openai", "POST {base_url}/chat/completions or {base_url}/completions"),
    ("Anthropic", "anthropic", "POST {base_url}/v1/messages"),
    ("Gemini", "gemini", "POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse"),
)


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo  # imports ChatClient and the gateway only when needed

    run_demo(sys.stdout)
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
        apis = ", then ".join(f"{title} ({route})" for title, _, route in _APIS)
        print(f"one base_url per scenario and API: {apis}:", flush=True)
        for name, summary in FaultGateway.scenarios().items():
            urls = "  ".join(gateway.base_url(name, api=api) for _, api, _ in _APIS)
            print(f"  {name:<22} {urls}  # {summary}", flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        gateway.stop()
    print("FaultGateway stopped", flush=True)
    return 0


def _probe(args: argparse.Namespace) -> int:
    def fail(message: str) -> int:
        print(f"watchdog-sync probe: error: {message}", file=sys.stderr)
        return 2

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            return fail(f"environment variable {args.api_key_env} is not set or empty")
    if not args.base_url.startswith(("http://", "https://")):
        shown = safe_url(args.base_url)
        return fail(f"--base-url must start with http:// or https://, got {shown!r}")
    try:
        report = run_probe(
            args.base_url,
            args.model,
            api_key=api_key,
            prompt=args.prompt,
            max_tokens=args.max_tokens,
            timeout=TIMEOUT_UNSET if args.timeout is None else args.timeout,
            idle_timeout=IDLE_TIMEOUT_UNSET if args.idle_timeout is None else args.idle_timeout,
        )
    except ValueError as exc:  # a bad --timeout or environment value, named in the message
        return fail(str(exc))
    except WatchdogError as exc:
        if args.json:
            print(json.dumps({"ok": False, "reason": exc.reason, "error": str(exc)}))
        else:
            print(f"probe failed: {exc.reason}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ok": True, **report.as_dict()}))
        return 0
    print(_format_report(report))
    return 0


_PROMPT = "Count from 1 to 20, one number per line."


def _from_env(setting: Unset) -> str:
    """``(default: 600 s, built-in; $VAR overrides)`` or ``(default: 30 s, from $VAR)``."""
    value, source = origin(setting)
    return f"(default: {value} s, {source})".replace("%", "%%")


def _seconds(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _format_report(report: ProbeReport) -> str:
    lines = [
        f"probe of {report.url} (model {report.model})",
        f"  status             {report.status}",
        f"  headers after      {_seconds(report.headers_after)}",
        f"  first event after  {_seconds(report.first_event_after)}",
        f"  events             {report.events}",
        f"  gaps               median {_seconds(report.gap_median)}  p90 {_seconds(report.gap_p90)}"
        f"  p99 {_seconds(report.gap_p99)}  max {_seconds(report.gap_max)}",
        f"  total              {_seconds(report.total)}",
        f"  finish_reason      {report.finish_reason or '- (none: the stream ended without one)'}",
        f"  server request id  {report.server_request_id or '-'}",
        f"suggested idle_timeout: {report.suggested_idle_timeout:.0f}s "
        "(3x the longest wait seen, at least 10 s; allow more for thinking models)",
    ]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="watchdog-sync", description=_DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="show what watchdog_sync saves you from",
        description="Start a FaultGateway in-process and run a plain requests + sseclient-py "
        "client and ChatClient side by side on each incident scenario (about 12 s).",
    )
    demo.set_defaults(run=_demo)
    gateway = commands.add_parser(
        "gateway",
        help="run the FaultGateway (misbehaving OpenAI, Anthropic and Gemini APIs) in the "
        "foreground",
        description="Run the FaultGateway in the foreground and print, for each scenario, "
        "one base URL per API it speaks: OpenAI, Anthropic and Gemini (for google-genai's "
        "HttpOptions(base_url=...)); Ctrl-C (SIGINT) or SIGTERM stops it.",
    )
    gateway.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, built-in)"
    )
    gateway.add_argument(
        "--port", type=int, default=0, help="port (default: 0, a free one, built-in)"
    )
    gateway.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host that is not loopback (default: off, built-in)",
    )
    gateway.add_argument(
        "--certfile", help="PEM certificate chain: serve HTTPS (default: none, plain HTTP)"
    )
    gateway.add_argument(
        "--keyfile", help="PEM private key, if not inside --certfile (default: none)"
    )
    gateway.set_defaults(run=_gateway)
    probe = commands.add_parser(
        "probe",
        help="stream one short completion from an endpoint and print its timeline",
        description="Stream one short completion and print the time to headers, the time to "
        "the first event, the gaps between events (median, p90, p99, max), the total, the "
        "finish_reason and a suggested idle_timeout. Exits 1 with the error's reason when "
        "the call fails.",
    )
    probe.add_argument("--base-url", required=True, help="e.g. https://api.example.com/v1")
    probe.add_argument("--model", required=True, help="the model to ask")
    probe.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="environment variable holding the API key (default: none, no key is sent)",
    )
    probe.add_argument(
        "--prompt",
        default=_PROMPT,
        help=f"what to ask (default: {_PROMPT!r}, built-in)",
    )
    probe.add_argument(
        "--max-tokens",
        type=int,
        default=128,
        help="max_tokens of the request (default: 128, built-in)",
    )
    probe.add_argument(
        "--timeout",
        type=float,
        help="the whole probe, seconds; 'inf' turns it off " + _from_env(TIMEOUT_UNSET),
    )
    probe.add_argument(
        "--idle-timeout",
        type=float,
        help="the longest wait for the first event and between events, seconds; 0 or less "
        "turns it off " + _from_env(IDLE_TIMEOUT_UNSET),
    )
    probe.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (default: off, a table for people)",
    )
    probe.set_defaults(run=_probe)
    add_run_command(commands)
    args = parser.parse_args(argv)
    return int(args.run(args))
