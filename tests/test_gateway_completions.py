"""FaultGateway: the legacy OpenAI completions route and ``fault_on``, one bad request in a run."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
import requests

from watchdog_sync.testing import FaultGateway

from .test_gateway import sse_data

pytestmark = pytest.mark.timeout(30)

PROMPT = {"model": "test-model", "prompt": "say hello"}
SILENCE = 0.3  # how long a test listens to a silent connection


def complete(base: str, body: Dict[str, Any], *, read: float = 2.0) -> requests.Response:
    """POST a legacy completion (``Connection: close``: no pooled socket outlives the test)."""
    return requests.post(
        base + "/completions",
        json=body,
        stream=True,
        timeout=(2, read),
        headers={"Connection": "close"},
    )


def chat(base: str) -> requests.Response:
    return requests.post(
        base + "/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
        timeout=(2, SILENCE),
        headers={"Connection": "close"},
    )


def outcome(base: str, route: str = "completions") -> str:
    """'200', '500', ... or 'timeout' / 'reset' for one request on ``route``."""
    try:
        if route == "chat":
            with chat(base) as response:
                return str(response.status_code)
        with complete(base, PROMPT, read=SILENCE) as response:
            response.content  # noqa: B018 - read the body (a silent one times out)
            return str(response.status_code)
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        return "timeout" if "timed out" in str(exc) else "reset"


# -- the legacy completions route ----------------------------------------------------------


def test_completions_route_answers_a_text_completion_json(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok", text="fine then")
    with complete(base, PROMPT) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "application/json"
        body = response.json()
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-") and body["model"] == "test-model"
    assert body["choices"] == [
        {"text": "fine then", "index": 0, "logprobs": None, "finish_reason": "stop"}
    ]
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    (seen,) = fault_gateway.requests_seen(base)
    assert seen.path.endswith("/v1/completions") and not seen.stream


def test_completions_stream_is_text_completion_events_ending_in_done(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("ok", chunks=3, text="one two three")
    with complete(base, {**PROMPT, "stream": True}) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        values = sse_data(response.raw.read())
    assert values[-1] == "[DONE]"
    chunks = [json.loads(value) for value in values[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"text_completion"}
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == "one two three"
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None] * 3 + ["stop"]
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def test_completions_answer_one_choice_per_prompt_with_logprobs_and_echo(
    fault_gateway: FaultGateway,
) -> None:
    """lm-eval's loglikelihood request: token-id prompts, echo, logprobs=1, max_tokens=1."""
    base = fault_gateway.base_url("ok", text="x")
    body = {"model": "m", "prompt": [[1, 2, 3], [4, 5]], "echo": True, "logprobs": 1}
    with complete(base, {**body, "max_tokens": 1}) as response:
        choices = response.json()["choices"]
    assert [choice["index"] for choice in choices] == [0, 1]
    first = choices[0]["logprobs"]
    assert first["tokens"] == ["1", "2", "3", "x"]
    assert first["token_logprobs"] == [None, -1.0, -1.0, -1.0]
    assert first["top_logprobs"][1:] == [{"2": -1.0}, {"3": -1.0}, {"x": -1.0}]
    assert len(choices[1]["logprobs"]["tokens"]) == 3


def test_completions_get_every_scenario_in_the_text_completion_shape(
    fault_gateway: FaultGateway,
) -> None:
    """A fault on the completions route: a cut stream ends without finish_reason and [DONE]."""
    base = fault_gateway.base_url("no_finish_reason", chunks=2)
    with complete(base, {**PROMPT, "stream": True}) as response:
        values = sse_data(response.raw.read())
    chunks = [json.loads(value) for value in values]
    assert [chunk["object"] for chunk in chunks] == ["text_completion"] * 2
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks)


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("silent_after_200", "timeout"),
        ("no_headers", "timeout"),
        ("reset_before_headers", "reset"),
        ("http429", "429"),
        ("http500", "500"),
    ],
)
def test_completions_route_serves_the_faults(
    fault_gateway: FaultGateway, scenario: str, expected: str
) -> None:
    assert outcome(fault_gateway.base_url(scenario)) == expected


def test_completions_error_body_has_the_openai_shape(fault_gateway: FaultGateway) -> None:
    with complete(fault_gateway.base_url("http400"), PROMPT) as response:
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_completions_on_an_anthropic_route_gets_404(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok", api="anthropic")
    with complete(base + "/v1", PROMPT) as response:
        assert response.status_code == 404
        assert "/v1/messages" in response.json()["error"]["message"]


def test_get_on_the_completions_route_gets_405(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("ok")
    response = requests.get(base + "/completions", timeout=2, headers={"Connection": "close"})
    assert response.status_code == 405
    assert "use POST for completions" in response.text


# -- fault_on ------------------------------------------------------------------------------


def test_fault_on_faults_only_the_listed_requests(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("http500", fault_on=(2, 4))
    assert [outcome(base) for _ in range(5)] == ["200", "500", "200", "500", "200"]
    seen = fault_gateway.requests_seen(base)
    assert [r.faulted for r in seen] == [False, True, False, True, False]


def test_fault_on_stages_one_silent_request_in_the_middle_of_a_run(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("silent_after_200", fault_on=(3,))
    assert [outcome(base) for _ in range(4)] == ["200", "200", "timeout", "200"]


def test_fault_on_numbers_the_requests_across_both_openai_routes(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("http503", fault_on=(2,))
    assert [outcome(base, "chat"), outcome(base), outcome(base, "chat")] == ["200", "503", "200"]


def test_fault_on_replaces_a_then_ok_scenarios_own_fail_first(
    fault_gateway: FaultGateway,
) -> None:
    base = fault_gateway.base_url("http500_then_ok", fault_on=(2,))
    assert [outcome(base) for _ in range(3)] == ["200", "500", "200"]


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (3, TypeError, r"tuple of request numbers such as \(3,\)"),
        ((), ValueError, "at least one request"),
        ((0,), ValueError, "numbered from 1"),
        ((1, -2), ValueError, "numbered from 1"),
        ((True,), TypeError, "must hold ints"),
        (("2",), TypeError, "must hold ints"),
        ("12", TypeError, "not str"),
    ],
)
def test_bad_fault_on_values_are_rejected(
    fault_gateway: FaultGateway, value: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        fault_gateway.base_url("http500", fault_on=value)


def test_fault_on_and_fail_first_together_are_rejected(fault_gateway: FaultGateway) -> None:
    with pytest.raises(ValueError, match=r"fail_first .* or fault_on .*, not both"):
        fault_gateway.base_url("http500", fail_first=1, fault_on=(2,))


def test_fault_on_is_not_an_option_of_ok(fault_gateway: FaultGateway) -> None:
    with pytest.raises(ValueError, match="unknown option 'fault_on' for scenario 'ok'"):
        fault_gateway.base_url("ok", fault_on=(1,))


def test_fault_on_duplicates_count_once(fault_gateway: FaultGateway) -> None:
    base = fault_gateway.base_url("http500", fault_on=[1, 1])
    results: List[str] = [outcome(base) for _ in range(2)]
    assert results == ["500", "200"]
