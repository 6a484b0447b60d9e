"""The StreamIdleTimeout a guarded stream raises: what was waited for, and the knob to turn."""

from __future__ import annotations

from typing import Optional

from .._core.config import ENV_IDLE_TIMEOUT
from .._core.errors import StreamIdleTimeout

__all__ = ["idle_timeout_error"]


def idle_timeout_error(
    *,
    first_phase: bool,
    first_named: bool,
    waited: float,
    limit: float,
    chunks: int,
    lifetime: float,
    stage: Optional[str],
) -> StreamIdleTimeout:
    """The error for a stream silent past ``limit``: before its first item, or after ``chunks``."""
    if first_phase:
        what = f"no first item within {waited:.2f}s of opening the stream"
        knob = "first_item_timeout=" if first_named else "idle_timeout="
    else:
        what = f"no stream activity for {waited:.2f}s after {chunks} chunks"
        knob = "idle_timeout="
    return StreamIdleTimeout(
        f"{what} (limit {limit:g}s, stream open {lifetime:.2f}s); if the source is "
        f"legitimately this slow, raise {knob} (or the {ENV_IDLE_TIMEOUT} environment "
        "variable)",
        idle_timeout=limit,
        chunks_received=chunks,
        stream_lifetime=lifetime,
        stage=stage,
        elapsed=lifetime,
    )
