"""urllib3's pyopenssl add-on and an HTTPS proxy (issue 21), on a TLS proxy stand-in on 127.0.0.1.

pyopenssl's ``WrappedSocket`` (the socket of a TLS connection to the proxy) has
``settimeout`` but no ``gettimeout``: the proxy tunnel's reads and the budget clip asked it
for its timeout, so inside a scope (and always through ``Session``) the caller got
``AttributeError`` instead of urllib3's own ``ProxySchemeUnsupported`` (pyopenssl cannot
do TLS inside TLS). Now the caller gets what it gets outside a scope, and a proxy that never
finishes its reply to CONNECT still ends at the deadline.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Any, Callable, Iterator, Tuple

import pytest
import requests
import trustme
import urllib3.contrib.pyopenssl as pyopenssl  # needs pyopenssl: the dev extra has it

import watchdog_sync as ws

from .rawserver import RawServer, read_request_head, wait_for_disconnect

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def tls_proxy_context() -> Iterator[Tuple[ssl.SSLContext, str]]:
    """A server context for the proxy stand-in and the CA file that trusts it; pyopenssl on."""
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    pyopenssl.inject_into_urllib3()
    try:
        with authority.cert_pem.tempfile() as cafile:
            yield context, cafile
    finally:
        pyopenssl.extract_from_urllib3()


def _established(conn: socket.socket, stop: threading.Event) -> None:
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    wait_for_disconnect(conn, stop, limit=5.0)


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    read_request_head(conn)  # the CONNECT, never answered
    wait_for_disconnect(conn, stop, limit=5.0)


def _session() -> Any:
    return ws.Session()


def _instrumented_requests() -> Any:
    return requests.Session()


CLIENTS = [_session, _instrumented_requests]


def _outcome(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(BaseException) as caught:
        call()
    return caught.value


@pytest.mark.parametrize("make", CLIENTS, ids=["Session", "requests after instrument()"])
def test_an_https_proxy_with_pyopenssl_fails_inside_a_scope_as_outside(
    tls_proxy_context: Tuple[ssl.SSLContext, str], make: Callable[[], Any]
) -> None:
    """urllib3's ProxySchemeUnsupported both ways (before: AttributeError 'gettimeout')."""
    context, cafile = tls_proxy_context
    undo = ws.instrument(httpx=False)
    try:
        with RawServer(_established, tls=context) as proxy, make() as session:
            proxies = {"https": proxy.url.replace("http://", "https://")}

            def get() -> Any:
                return session.get(
                    "https://localhost:9/", proxies=proxies, verify=cafile, timeout=5
                )

            outside = _outcome(get)

            def scoped() -> Any:
                with ws.deadline(5):
                    return get()

            inside = _outcome(scoped)
    finally:
        undo()
    assert type(outside).__name__ == "ProxySchemeUnsupported", repr(outside)
    assert (type(inside), str(inside)) == (type(outside), str(outside))


@pytest.mark.parametrize("make", CLIENTS, ids=["Session", "requests after instrument()"])
def test_a_silent_https_proxy_with_pyopenssl_ends_at_the_deadline(
    tls_proxy_context: Tuple[ssl.SSLContext, str], make: Callable[[], Any]
) -> None:
    context, cafile = tls_proxy_context
    undo = ws.instrument(httpx=False)
    try:
        with RawServer(_silent, tls=context) as proxy, make() as session:
            proxies = {"https": proxy.url.replace("http://", "https://")}
            started = time.monotonic()
            with pytest.raises(ws.DeadlineExceeded), ws.deadline(0.5):
                session.get("https://localhost:9/", proxies=proxies, verify=cafile, timeout=10)
            ended = time.monotonic() - started
    finally:
        undo()
    assert 0.45 <= ended < 1.1, f"ended after {ended:.2f}s, the deadline was 0.5 s"
