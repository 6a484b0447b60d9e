"""instrument(request_timeout=...)'s errors say where the request was (phase) and how far it
got, on requests/urllib3 and on httpx."""

from __future__ import annotations

import pickle
from typing import Any, Dict, Iterator

import httpx
import pytest
import requests

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(30)

LIMIT = 0.6
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CASES = [
    ("no_headers", {}, "head", "after sending the request, waiting"),
    ("silent_after_200", {}, "body", "after the head, "),
    ("slow_drip", {"interval": 0.05}, "body", "after the head"),
]


@pytest.fixture
def request_timeout() -> Iterator[None]:
    undo = ws.instrument(request_timeout=LIMIT)
    try:
        yield
    finally:
        undo()


@pytest.mark.parametrize(("scenario", "options", "phase", "words"), CASES)
@pytest.mark.usefixtures("request_timeout")
def test_a_requests_request_timeout_says_where_it_was(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str, words: str
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    with pytest.raises(requests.ReadTimeout) as info:
        requests.post(base + "/chat/completions", json=CHAT, headers={"Connection": "close"})
    error: Any = info.value
    assert isinstance(error, ws.WatchdogError) and error.reason == "request_timeout"
    assert error.phase == phase
    assert words in str(error)
    assert ws.classify(error).phase == phase
    assert pickle.loads(pickle.dumps(error)).phase == phase


@pytest.mark.parametrize(("scenario", "options", "phase", "words"), CASES)
@pytest.mark.usefixtures("request_timeout")
def test_an_httpx_request_timeout_says_where_it_was(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str, words: str
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    client = httpx.Client()
    with client, pytest.raises(httpx.TimeoutException) as info:
        client.post(base + "/chat/completions", json=CHAT).read()
    error: Any = info.value
    assert isinstance(error, ws.OperationTimeout) and error.reason == "request_timeout"
    assert error.phase == phase
    assert words in str(error)
    assert ws.classify(error).phase == phase
    assert pickle.loads(pickle.dumps(error)).phase == phase
