"""sseclient-py's field semantics, in time linear in the bytes.

sseclient-py joins each ``data:`` line onto the event's text (``+=``), quadratic in the
line count. :func:`parse_events` makes the same ``sseclient.Event`` objects (same fields,
same UTF-8 error) from events the framer already split and bounded, with one join:

- a line that is blank or starts with ``:`` is skipped; ``field:value`` drops
  one leading space of the value; a line without a colon is a field with an
  empty value; fields other than ``id``, ``event``, ``data``, ``retry`` are
  ignored; ``data`` lines join with ``\\n``; an event without data is not
  dispatched; an empty event name is ``message``;
- invalid UTF-8 anywhere in the event raises the ``UnicodeDecodeError`` that
  sseclient-py raises for that line.
"""

from __future__ import annotations

import re
from typing import List, Optional

import sseclient

__all__ = ["parse_events"]

_OTHER_FIELDS = re.compile(r"^(event|id|retry)(?:: ?(.*))?$", re.MULTILINE)
_DATA_LINE = re.compile(r"^data(?:: ?(.*))?$", re.MULTILINE)


def parse_events(framed: List[bytes]) -> List[sseclient.Event]:
    """The dispatched ``sseclient.Event`` of each framed event, in order.

    Each item ends with ``b"\\n\\n"`` and may hold several whole events, its line endings
    made ``b"\\n"`` by the framer.

    Raises:
        UnicodeDecodeError: an event is not valid UTF-8.
    """
    events: List[sseclient.Event] = []
    for raw in framed:
        if raw.startswith(b"data:") and raw.find(b"\n") == len(raw) - 2:
            value = raw[:-2].decode("utf-8")[5:]  # the common case: one data line
            made = sseclient.Event()
            made.data = value[1:] if value[:1] == " " else value
            events.append(made)
            continue
        for part in raw[:-2].split(b"\n\n"):
            parsed = _parse_one(part)
            if parsed is not None:
                events.append(parsed)
    return events


def _parse_one(raw: bytes) -> Optional[sseclient.Event]:
    """One event's fields (no blank line inside it), or ``None`` when it has no data."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        for line in raw.split(b"\n"):
            line.decode("utf-8")  # raises sseclient-py's error, for the line it fails on
        raise
    values = _DATA_LINE.findall(text)  # each without "data:" and one space after it
    if not values:
        return None
    event = sseclient.Event()
    event.data = "\n".join(values)
    if "\nevent" in text or "\nid" in text or "\nretry" in text or not text.startswith("data"):
        for match in _OTHER_FIELDS.finditer(text):
            setattr(event, match.group(1), match.group(2) or "")
    event.event = event.event or "message"
    return event
