"""The FaultGateway's Gemini API: both API versions, both methods, Google's error shape."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
import requests

from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(30)

BODY = {"contents": [{"role": "user", "parts": [{"text": "say hello"}]}]}
TEXT = "Hello from the watchdog_sync fault gateway."


def events(response: requests.Response) -> List[Dict[str, Any]]:
    lines = response.content.decode("utf-8").split("\n\n")
    assert all(line.startswith("data: ") for line in lines if line)
    return [json.loads(line[len("data: ") :]) for line in lines if line]


@pytest.mark.parametrize("version", ["v1", "v1beta"])
def test_a_stream_is_generate_content_responses_ended_by_a_finish_reason(
    fault_gateway: FaultGateway, version: str
) -> None:
    base = fault_gateway.base_url("ok", api="gemini")
    url = f"{base}/{version}/models/gemini-x:streamGenerateContent?alt=sse"
    response = requests.post(url, json=BODY, timeout=5)
    assert response.headers["content-type"].startswith("text/event-stream")
    chunks = events(response)
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert text == TEXT
    assert [c["candidates"][0].get("finishReason") for c in chunks][-1] == "STOP"
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["usageMetadata"]["promptTokenCount"] == 2
    assert chunks[-1]["modelVersion"] == "gemini-x"
    (seen,) = fault_gateway.requests_seen(base)
    assert (seen.api, seen.stream) == ("gemini", True)


def test_generate_content_is_one_response(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("no_finish_reason", api="gemini")
    response = requests.post(f"{base}/v1beta/models/m:generateContent", json=BODY, timeout=5)
    candidate = response.json()["candidates"][0]
    assert candidate["content"]["parts"][0]["text"] == TEXT
    assert "finishReason" not in candidate  # the fault, in its non-streaming form
    assert not fault_gateway.requests_seen(base)[0].stream


@pytest.mark.parametrize(
    ("scenario", "status", "name"),
    [
        ("http400", 400, "INVALID_ARGUMENT"),
        ("http401", 401, "UNAUTHENTICATED"),
        ("http429", 429, "RESOURCE_EXHAUSTED"),
        ("http503", 503, "UNAVAILABLE"),
    ],
)
def test_errors_have_googles_shape(
    fault_gateway: FaultGateway, scenario: str, status: int, name: str
) -> None:
    base = fault_gateway.base_url(scenario, api="gemini")
    response = requests.post(f"{base}/v1/models/m:streamGenerateContent?alt=sse", json=BODY)
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["status"]) == (status, status, name)
    assert "retry-after" not in response.headers  # Gemini says it in the body
    if status == 429:
        (info,) = error["details"]
        assert info == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}


def test_an_error_mid_stream_is_a_gemini_error_payload(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("error_mid_stream", api="gemini")
    response = requests.post(f"{base}/v1/models/m:streamGenerateContent?alt=sse", json=BODY)
    *chunks, last = events(response)
    assert len(chunks) == 2
    assert (last["error"]["code"], last["error"]["status"]) == (503, "UNAVAILABLE")


def test_a_path_of_another_api_is_a_404_naming_the_right_one(fault_gateway: FaultGateway) -> None:
    gemini = fault_gateway.base_url("ok", api="gemini")
    response = requests.post(gemini + "/v1/chat/completions", json={"stream": True}, timeout=5)
    assert response.status_code == 404
    assert ":streamGenerateContent" in response.json()["error"]["message"]
    openai = fault_gateway.base_url("ok").rsplit("/v1", 1)[0]
    response = requests.post(f"{openai}/v1/models/m:generateContent", json=BODY, timeout=5)
    error = response.json()["error"]
    assert (response.status_code, error["status"]) == (404, "NOT_FOUND")
    assert "/chat/completions" in error["message"]
