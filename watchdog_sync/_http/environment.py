"""Whether the environment can name a proxy, answered without reading every variable's value.

requests looks for proxies in the environment on every request (``trust_env``): urllib's
``getproxies_environment()`` decodes every variable, twice, and requests calls it twice, once
to ask whether the host bypasses proxies and once for the proxies themselves. With 38
variables its merge of a request's settings took 190 µs, 36 µs without those scans: a sixth of
a stream's open on loopback. Where urllib reads proxies from the environment alone (Linux and
the other POSIX systems; not macOS or Windows, which also ask the system), a proxy needs a
variable whose name ends in ``_proxy``, in any case: with none, requests would find none, and
:class:`Session` skips the look (``merge_environment_settings``). Any name with ``_proxy`` in
it, ``no_proxy`` included, sends the request down requests' own path.

What is read is what requests reads: ``os.environ`` as it is at the request, so a mapping
that replaced it (``mock.patch.object(os, "environ", ...)``, a test's monkeypatch) routes
like plain requests. While it is the process's own, its names are read as bytes, not
decoded (its bytes view shares its data); a replacement's names are read as they are.

:func:`proxy_urls` names the proxies a request may go through, for its secret set (a proxy's
password is masked wherever a server may echo it).
"""

from __future__ import annotations

import os
import urllib.request
from typing import Any, List, Optional

__all__ = ["may_name_a_proxy", "proxy_urls"]

# Where urllib asks the system too (macOS, Windows), only its own look can tell.
_ENVIRONMENT_ONLY = (
    os.supports_bytes_environ
    and urllib.request.getproxies is urllib.request.getproxies_environment
    and urllib.request.proxy_bypass is getattr(urllib.request, "proxy_bypass_environment", None)
)


# The process's environment, and its bytes view over the same data (``os.environb`` itself
# may be replaced on its own: requests never reads it).
_PROCESS_ENVIRON = os.environ
_PROCESS_NAMES = os.environb if os.supports_bytes_environ else None


def may_name_a_proxy() -> bool:
    """False only when no variable of ``os.environ`` (as it is now) can make requests use or
    bypass a proxy."""
    if not _ENVIRONMENT_ONLY:
        return True
    environ = os.environ
    if environ is _PROCESS_ENVIRON and _PROCESS_NAMES is not None:
        return b"_proxy" in b"\0".join(_PROCESS_NAMES).lower()
    return any("_proxy" in str(name).lower() for name in environ)


def proxy_urls(session: Optional[Any] = None) -> List[str]:
    """The proxy URLs a request may go through: ``session``'s own (a ``requests.Session``)
    and, unless it does not trust the environment, the environment's (none is looked for
    when no variable can name one)."""
    found = [url for url in getattr(session, "proxies", {}).values() if isinstance(url, str)]
    if getattr(session, "trust_env", True) and may_name_a_proxy():
        found += [url for url in urllib.request.getproxies().values() if isinstance(url, str)]
    return found
