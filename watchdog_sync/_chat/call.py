"""One chat call: what is sent, how it is bounded, and the boundary its attempts run in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

from .._core import scope as _scope
from .._core.budget import Budget
from .._core.errors import WatchdogError
from .._core.events import event_fields
from .._http.http import Session
from .._http.translate import Translator
from .errors import for_call, status_wording

__all__ = ["STAGE", "ChatCall", "run_in_call"]

STAGE = "chat"
T = TypeVar("T")


@dataclass(frozen=True, repr=False)
class ChatCall:
    """The request of one ``stream()`` or ``complete()`` call, the same for all its attempts.

    ``headers`` hold the credentials: the class has no field-by-field repr.
    The limits are resolved seconds; ``None`` means "off" (no limit of its own).
    """

    url: str
    body: Dict[str, Any]
    headers: Dict[str, str]
    secrets: Tuple[str, ...]
    session: Session
    request_id: str
    model: str
    idle_timeout: Optional[float]
    first_event_timeout: Optional[float]
    connect_timeout: Optional[float]

    def __repr__(self) -> str:
        return f"<ChatCall request_id={self.request_id!r} model={self.model!r}>"

    def fields(self) -> Dict[str, Any]:
        """The fields every event of this call carries."""
        return {"request_id": self.request_id, "model": self.model}

    def translator(self, attempt: Optional[int] = None) -> Translator:
        """The translation boundary for one attempt: the call's secrets, wording and fields."""
        return Translator(self.secrets, status_wording, self.request_id, attempt)


def run_in_call(call: ChatCall, budget: Budget, owner: Budget, fn: Callable[[], T]) -> T:
    """Run ``fn`` as the boundary of ``owner`` (its end becomes an ordinary error).

    Events inside carry the call's ``request_id`` and ``model``; every
    :class:`WatchdogError` leaving carries ``request_id`` (the retry loop's own
    errors, for one, are built without it). An end of an outer scope's budget
    passes through to that scope.
    """
    with event_fields(**call.fields()):
        try:
            with _scope.boundary(budget, owner):
                return fn()
        except WatchdogError as exc:
            raise for_call(exc, call.request_id)  # noqa: B904  (a copy of exc, with its cause)
