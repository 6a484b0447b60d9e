"""Interim (1xx) responses skipped before the final one, on the connections we read.

http.client skips only ``100 Continue``; any other interim response, such as
``103 Early Hints`` (sent by CDNs and gateways ahead of a slow answer), becomes the
response itself, and the final answer behind it is never read. RFC 9110
(section 15.2) says a client must read past every interim response to the final
one. :class:`FinalResponse` does: each interim response's status line and headers
are read and dropped (http.client's own limits on header size and count bound
each one). ``101 Switching Protocols`` stays final: nothing here asks to switch.

On timeout or cancel: the interim responses are read through the same socket as
the final one, so the budget's end (and a stream's first-event limit) shuts them
from outside like any other part of the response head; however many come, they
never extend it.
"""

from __future__ import annotations

import http.client
from typing import Tuple

__all__ = ["FinalResponse"]

_SWITCHING_PROTOCOLS = 101


class FinalResponse(http.client.HTTPResponse):
    """An http.client response that reads past every interim (1xx) response."""

    def _read_status(self) -> Tuple[str, int, str]:
        while True:
            version, status, reason = super()._read_status()  # type: ignore[misc]
            if not 100 < status < 200 or status == _SWITCHING_PROTOCOLS:
                return version, status, reason  # 100: http.client skips it itself
            http.client.parse_headers(self.fp)  # the interim response's headers, dropped
