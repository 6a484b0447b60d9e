"""A request's own timeout (instrument(request_timeout=...)) as httpx raises a timeout.

The error is of httpx's ``TimeoutException`` family (of httpx2 or httpx: the
library the request went through), so the SDKs on httpx map it to their own
timeout error (``openai.APITimeoutError``, ...) and retry it as one; it is
also an :class:`OperationTimeout` with ``reason='request_timeout'``,
retryable. The class is made for a library when first needed: importing
watchdog_sync never imports httpx. It pickles, like every error of ours.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Optional, Tuple

from .._core.budget import Budget
from .._core.errors import Cancelled, OperationTimeout
from .._http.request_timeout import REQUEST_TIMEOUT, request_timeout_message
from .cores import PerLibrary

__all__ = ["request_timeout_error"]


def request_timeout_error(
    lib: Any, budget: Budget, cause: BaseException, phase: Optional[str] = None
) -> OperationTimeout:
    """The error for a request of ``lib`` (``httpx2`` or ``httpx``) whose own timeout ended
    (``budget``: the request's) with ``cause``: where the request was is the ``Cancelled``'s
    word, else ``phase``."""
    progress = None
    if isinstance(cause, Cancelled) and cause.phase is not None:
        phase, progress = cause.phase, cause.progress
    error: OperationTimeout = _class_for(lib)(request_timeout_message(budget, progress))
    error.phase = phase
    return error


def _make_class(lib: Any) -> type:
    namespace = {
        "__module__": __name__,
        "__doc__": (
            f"A request's own timeout: {lib.__name__}.TimeoutException, and "
            "watchdog_sync's OperationTimeout (reason 'request_timeout')."
        ),
        "default_reason": REQUEST_TIMEOUT,
        "_library": lib.__name__,
        "__init__": _init,
        "__reduce__": _reduce,
    }
    return type("RequestTimeout", (OperationTimeout, lib.TimeoutException), namespace)


_class_for: PerLibrary[type] = PerLibrary(_make_class)


def _init(self: Any, message: str) -> None:
    OperationTimeout.__init__(self, message)
    self._request = None  # httpx's own errors: set by httpx when the request is known


def _reduce(self: Any) -> Tuple[Any, ...]:
    # A copy carries our fields, not httpx's request (its body and headers stay here).
    fields = {name: value for name, value in vars(self).items() if name != "_request"}
    return (_rebuilt, (self._library, self.message, fields))


def _rebuilt(library: str, message: str, fields: Dict[str, Any]) -> Any:
    """Unpickle: the class of ``library`` (imported, and made if need be)."""
    error = _class_for(importlib.import_module(library))(message)
    vars(error).update(fields)
    return error
