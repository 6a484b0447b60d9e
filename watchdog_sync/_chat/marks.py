"""The boundary of one chat call for observers: what its ``call_start`` / ``call_end`` say.

Ids, names and numbers only: the model, the server's host and port, the idle
limit, the finish reason. Never the prompt, the answer or the credentials.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .._core.budget import Budget
from .._core.calls import CallMark
from .call import STAGE, ChatCall

__all__ = ["chat_mark", "finish_reason_of"]


def chat_mark(
    call: ChatCall,
    budget: Budget,
    server: Tuple[Optional[str], Optional[int]],
    idle_timeout: Optional[float],
) -> CallMark:
    """Start observing ``call``: operation ``chat_stream`` or ``chat``; the caller ends it.

    Its retry loop is part of it (``absorbs``): the attempts are the chat call's.
    """
    return CallMark(
        "chat_stream" if call.body.get("stream") else "chat",
        budget=budget,
        absorbs="retry",
        stage=STAGE,
        request_id=call.request_id,
        model=call.model,
        server_address=server[0],
        server_port=server[1],
        idle_timeout_ms=None if idle_timeout is None else idle_timeout * 1000.0,
    )


def finish_reason_of(completion: Dict[str, Any]) -> Optional[str]:
    """``choices[0].finish_reason`` of a completion, when it is a string."""
    choices = completion.get("choices")
    if choices and type(choices) is list and type(choices[0]) is dict:
        reason = choices[0].get("finish_reason")
        if isinstance(reason, str):
            return reason
    return None
