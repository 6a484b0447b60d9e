"""json_object(): the JSON object that a body or an event holds, or ``None``, whatever arrived."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

__all__ = ["json_object"]

_loads = json.loads


def json_object(data: Union[str, bytes]) -> Optional[Dict[str, Any]]:
    """The JSON object ``data`` holds; ``None`` when it holds anything else.

    Anything else: not JSON, bytes that are not UTF-8, another JSON type, or a
    document nested deeper than the interpreter's recursion limit (``json`` raises
    ``RecursionError`` for that, which ``except ValueError`` does not catch: a
    thousand ``[`` are enough). The caller turns ``None`` into its own error.
    """
    try:
        value = _loads(data)
    except (ValueError, RecursionError):
        return None
    return value if type(value) is dict else None
