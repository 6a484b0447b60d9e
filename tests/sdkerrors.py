"""What an SDK's user sees when a stream's body fails: the error itself, or the SDK's wrapper.

anthropic 2.17 and later read a stream's body through ``iter_response_bytes()``, which
re-raises any ``Exception`` from a read as the SDK's own error, the original as its
``__cause__``: httpx's ``TimeoutException`` family as ``APITimeoutError``, anything else as
``APIConnectionError``; ``AnthropicError`` and ``BaseException`` (our ``Cancelled``) pass
through. Older anthropic releases, and the openai and google-genai SDKs, let the error through
unwrapped. ``raises_from_body`` asserts what the installed release does, never either.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Generic, Iterator, Optional, Type, TypeVar

import anthropic
import httpx2
import pytest

__all__ = ["ANTHROPIC_WRAPS_BODY_ERRORS", "Raised", "raises_from_body"]

E = TypeVar("E", bound=BaseException)

ANTHROPIC_WRAPS_BODY_ERRORS = hasattr(anthropic._streaming, "iter_response_bytes")


@dataclass
class Raised(Generic[E]):
    """``value``: the error the body read raised; ``seen``: what reached the SDK's caller."""

    value: E = field(init=False)
    seen: BaseException = field(init=False)


def _wrapper_for(cause: BaseException) -> Optional[Type[BaseException]]:
    """The class anthropic wraps ``cause`` in when the installed release wraps body errors."""
    if not ANTHROPIC_WRAPS_BODY_ERRORS or not isinstance(cause, Exception):
        return None
    if isinstance(cause, anthropic.AnthropicError):
        return None
    if isinstance(cause, httpx2.TimeoutException):
        return anthropic.APITimeoutError
    return anthropic.APIConnectionError


@contextlib.contextmanager
def raises_from_body(expected: Type[E], *, sdk: str = "anthropic") -> Iterator[Raised[E]]:
    """Expect ``expected`` from a stream body read under ``sdk``: as it is, or (anthropic 2.17
    and later) as the cause of exactly the SDK error that release wraps it in."""
    raised: Raised[E] = Raised()
    with pytest.raises(BaseException) as info:
        yield raised
    seen = info.value
    cause = seen.__cause__ if sdk == "anthropic" else None
    if cause is not None and isinstance(cause, expected):
        wrapper = _wrapper_for(cause)
        assert wrapper is not None and type(seen) is wrapper, (type(seen), cause)
        raised.value = cause
    else:
        assert isinstance(seen, expected), f"{type(seen).__name__}: {seen}"
        assert sdk != "anthropic" or _wrapper_for(seen) is None, "this release wraps it"
        raised.value = seen
    raised.seen = seen
