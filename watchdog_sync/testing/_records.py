"""What the FaultGateway saw: SeenRequest snapshots and the records behind them."""

from __future__ import annotations

import copy
import itertools
import json
import time
import types
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from .._core.redact import MASK, SENSITIVE_HEADERS
from ._scenarios import Scenario
from ._wire import Request

__all__ = ["Record", "Route", "SeenRequest", "wants_stream"]


@dataclass(frozen=True)
class SeenRequest:
    """One request the gateway received on a route (a snapshot).

    Attributes:
        key: the run key of the ``base_url`` it was sent to.
        scenario: the scenario name of that ``base_url``.
        api: that ``base_url``'s wire format: ``"openai"`` (chat completions),
            ``"anthropic"`` (Messages API) or ``"gemini"`` (the Gemini API).
        attempt: 1 for the first request to that ``base_url``, 2 for the next, ...
        faulted: True if the scenario misbehaved, False if it answered like ``ok``
            (``fail_first`` reached, or a request ``fault_on`` does not list).
        method: the HTTP method.
        path: the request target, as sent.
        stream: whether the request asked for a stream (``"stream": true``; Gemini:
            ``:streamGenerateContent``).
        body: the parsed JSON body (a copy), or None if it was not JSON.
        headers: the request headers, names lower-cased; secret ones
            (Authorization, cookies, API-key headers) are replaced by ``"[REDACTED]"``.
        request_id: the ``X-Request-ID`` header, if the client sent one.
        arrived_at: ``time.monotonic()`` when the whole request had been read.
        ended_at: ``time.monotonic()`` when the gateway finished with it, None while running.
        client_disconnected: True if the client closed or reset the connection
            before the gateway had finished the response.
        status: the HTTP status sent, None if no status line was sent.
    """

    key: str
    scenario: str
    api: str
    attempt: int
    faulted: bool
    method: str
    path: str
    stream: bool
    body: Any
    headers: Mapping[str, str]
    request_id: Optional[str]
    arrived_at: float
    ended_at: Optional[float]
    client_disconnected: bool
    status: Optional[int]


class Route:
    """A ``base_url`` registered on the server: its scenario, API, options and attempt count."""

    def __init__(
        self,
        key: str,
        scenario: Scenario,
        options: Dict[str, Any],
        ok_options: Dict[str, Any],
        api: str = "openai",
    ) -> None:
        self.key = key
        self.scenario = scenario
        self.api = api
        self.options = options
        self.ok_options = ok_options
        self.attempts = itertools.count(1)


class Record:
    """The mutable state behind a SeenRequest, guarded by the gateway's lock."""

    def __init__(
        self,
        route: Route,
        attempt: int,
        faulted: bool,
        request: Request,
        stream: Optional[bool] = None,
    ) -> None:
        self.route = route
        self.attempt = attempt
        self.faulted = faulted
        self.request = request
        self.body = _parse_json(request.body)
        # Gemini asks for a stream by its URL; the other APIs by "stream": true.
        self.stream = wants_stream(self.body) if stream is None else stream
        self.arrived_at = time.monotonic()
        self.ended_at: Optional[float] = None
        self.client_disconnected = False
        self.status: Optional[int] = None

    def snapshot(self) -> SeenRequest:
        headers = {
            name: MASK if name in SENSITIVE_HEADERS else value
            for name, value in self.request.headers.items()
        }
        return SeenRequest(
            key=self.route.key,
            scenario=self.route.scenario.name,
            api=self.route.api,
            attempt=self.attempt,
            faulted=self.faulted,
            method=self.request.method,
            path=self.request.target,
            stream=self.stream,
            body=_copied(self.body),
            headers=types.MappingProxyType(headers),
            request_id=self.request.headers.get("x-request-id"),
            arrived_at=self.arrived_at,
            ended_at=self.ended_at,
            client_disconnected=self.client_disconnected,
            status=self.status,
        )


def _parse_json(body: bytes) -> Any:
    """The request's JSON, ``None`` for anything else (a body nested past the recursion
    limit raises ``RecursionError``, which ``ValueError`` does not catch)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _copied(body: Any) -> Any:
    """A copy a test may change; ``None`` for JSON too deep to copy (``json`` parses
    deeper than ``copy.deepcopy``, whose frames per level are more)."""
    try:
        return copy.deepcopy(body)
    except RecursionError:
        return None


def wants_stream(body: Any) -> bool:
    return isinstance(body, dict) and body.get("stream") is True
