"""Name resolution within a timeout: ``getaddrinfo`` has none of its own.

The lookup runs in a short-lived daemon thread; the caller waits at most the
timeout and then raises ``socket.timeout``, while the helper thread ends
whenever the resolver returns.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import threading
from typing import Any, List, Optional

__all__ = ["addresses_bounded", "is_ip_literal", "resolve_bounded"]


@functools.lru_cache(maxsize=256)  # few hosts per process; parsing one is ~5 µs of each open
def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def resolve_bounded(host: str, port: int, timeout: Optional[float]) -> str:
    """Resolve ``host`` in a helper thread, waiting at most ``timeout`` seconds."""
    return addresses_bounded(host, port, timeout)[0]


def addresses_bounded(host: str, port: int, timeout: Optional[float]) -> List[str]:
    """Every address of ``host`` (in the resolver's order), resolved in a helper thread
    within ``timeout`` seconds; ``socket.timeout`` after that, the resolver's
    ``OSError`` (``socket.gaierror``) if it fails."""
    result: List[Any] = []
    done = threading.Event()

    def resolve() -> None:
        try:
            result.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except OSError as exc:
            result.append(exc)
        finally:
            done.set()

    threading.Thread(target=resolve, name="watchdog_sync-dns", daemon=True).start()
    if not done.wait(timeout):
        raise socket.timeout(f"name resolution of {host!r} took longer than {timeout:.2f}s")
    outcome = result[0]
    if isinstance(outcome, OSError):
        raise outcome
    return list(dict.fromkeys(str(info[4][0]) for info in outcome))
