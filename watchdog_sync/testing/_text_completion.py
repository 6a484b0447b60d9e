"""The OpenAI legacy completions wire format of the FaultGateway (``POST {base_url}/completions``).

Harnesses still use this route: lm-evaluation-harness's ``local-completions``
model scores loglikelihood tasks with it (``echo`` and ``logprobs`` asked for).
A request's ``prompt`` is a string, a list of strings, a list of token ids or a
list of those lists; a non-streamed answer has one choice per prompt, a
stream answers the first prompt (choice index 0) and ends with
``data: [DONE]``. ``logprobs`` (an int) adds a deterministic ``logprobs``
object to each choice: every token's log probability is -1.0 and is the top
one, so a harness reads every continuation as greedy.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Union

from ._format import Event, dumps
from ._openai import error_body

__all__ = ["TextCompletionRendering"]

_DONE: Event = (None, b"[DONE]")
_MALFORMED = b'data: {"id": "malformed", "object": "text_completion", "choices": [\n\n'
_TOKEN = re.compile(r"\s*\S+")
_LOGPROB = -1.0

Prompt = Union[str, List[int]]


def _prompts(body: Any) -> List[Prompt]:
    """The request's prompts: one per choice (a missing or odd prompt counts as one empty one)."""
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(item, int) and not isinstance(item, bool) for item in prompt):
            return [prompt]
        if all(isinstance(item, (str, list)) for item in prompt):
            return [item if isinstance(item, str) else _token_ids(item) for item in prompt]
    return [""]


def _token_ids(items: List[Any]) -> List[int]:
    return [item for item in items if isinstance(item, int) and not isinstance(item, bool)]


def _tokens(prompt: Prompt) -> List[str]:
    """Deterministic tokens: words with their leading space, or each token id as text."""
    if isinstance(prompt, str):
        return _TOKEN.findall(prompt)
    return [str(token) for token in prompt]


class TextCompletionRendering:
    """``text_completion`` events ended by ``data: [DONE]``; ``text_completion`` bodies."""

    retry_in_body = False

    def __init__(self, ident: str, created: int, model: str, body: Any, *, usage: bool) -> None:
        self._ident = ident
        self._created = created
        self._model = model
        self._prompts = _prompts(body)
        self._usage = usage
        options = body if isinstance(body, dict) else {}
        logprobs = options.get("logprobs")
        self._logprobs = isinstance(logprobs, int) and not isinstance(logprobs, bool)
        self._echo = options.get("echo") is True

    def _payload(self, choices: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "id": self._ident,
            "object": "text_completion",
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }

    def _usage_of(self, text: str, answers: int) -> Optional[Dict[str, int]]:
        if not self._usage:
            return None
        prompt = sum(len(_tokens(prompt)) for prompt in self._prompts)
        completion = answers * len(_tokens(text))
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _choice(
        self, index: int, text: str, finish_reason: Optional[str], prompt: Optional[Prompt]
    ) -> Dict[str, Any]:
        logprobs = None if prompt is None else self._logprobs_of(prompt, text)
        echoed = prompt if self._echo and isinstance(prompt, str) else ""
        return {
            "text": echoed + text,
            "index": index,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }

    def _logprobs_of(self, prompt: Prompt, text: str) -> Optional[Dict[str, Any]]:
        if not self._logprobs:
            return None
        tokens = (_tokens(prompt) if self._echo else []) + _tokens(text)
        values: List[Optional[float]] = [_LOGPROB] * len(tokens)
        top: List[Optional[Dict[str, float]]] = [{token: _LOGPROB} for token in tokens]
        if self._echo and tokens:  # the API gives the first prompt token no log probability
            values[0], top[0] = None, None
        offsets, at = [], 0
        for token in tokens:
            offsets.append(at)
            at += len(token)
        return {
            "tokens": tokens,
            "token_logprobs": values,
            "top_logprobs": top,
            "text_offset": offsets,
        }

    def text(self, piece: str) -> List[Event]:
        return [(None, dumps(self._payload([self._choice(0, piece, None, None)])))]

    def finish(self, text: str) -> List[Event]:
        payload = self._payload([self._choice(0, "", "stop", None)])
        usage = self._usage_of(text, 1)
        if usage is not None:
            payload["usage"] = usage
        return [(None, dumps(payload)), _DONE]

    def completion(self, content: str, *, finished: bool = True) -> bytes:
        reason = "stop" if finished else None
        choices = [
            self._choice(index, content, reason, prompt)
            for index, prompt in enumerate(self._prompts)
        ]
        payload = self._payload(choices)
        usage = self._usage_of(content, len(choices))
        if usage is not None:
            payload["usage"] = usage
        return dumps(payload)

    def error_body(self, message: str, error_type: str, code: Optional[str]) -> bytes:
        return error_body(message, error_type, code)

    def error_event(self, message: str, error_type: str, code: Optional[str]) -> Event:
        """``data: {"error": {...}}``, as on the chat route."""
        return (None, error_body(message, error_type, code))

    def malformed(self) -> bytes:
        return _MALFORMED
