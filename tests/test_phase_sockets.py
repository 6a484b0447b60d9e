"""instrument(sockets=True): a deadline that cuts a plain socket says as much of where it was
as a socket can know (tls, send, head: nothing read back yet, body: bytes came)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.request
from typing import Any, Dict

import pytest

import watchdog_sync as ws
from watchdog_sync.testing import FaultGateway

from .rawserver import RawServer, full_accept_queue, mute

pytestmark = pytest.mark.timeout(30)

LIMIT = 0.6
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def post(url: str) -> None:
    request = urllib.request.Request(
        url, data=CHAT, headers={"Content-Type": "application/json", "Connection": "close"}
    )
    with urllib.request.urlopen(request) as response:
        response.read()


@pytest.mark.parametrize(
    ("scenario", "options", "phase", "words"),
    [
        ("no_headers", {}, "head", "connected, no byte read back in "),
        ("silent_after_200", {}, "body", " bytes read, the last "),
        ("slow_drip", {"interval": 0.05}, "body", " bytes read, the last "),
    ],
)
@pytest.mark.usefixtures("bound_sockets")
def test_a_plain_socket_request_says_where_its_deadline_found_it(
    fault_gateway: FaultGateway, scenario: str, options: Dict[str, Any], phase: str, words: str
) -> None:
    base = fault_gateway.base_url(scenario, **options)
    with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
        post(base + "/chat/completions")
    assert info.value.phase == phase
    assert words in str(info.value)


@pytest.mark.usefixtures("bound_sockets")
def test_a_silent_tls_handshake_on_a_plain_socket_is_phase_tls() -> None:
    with RawServer(mute) as server:
        context = ssl.create_default_context()
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context)
        with pytest.raises(ws.DeadlineExceeded) as info, ws.deadline(LIMIT):
            connection.request("GET", "/")
        connection.close()
    assert info.value.phase == "tls"
    assert "during the TLS handshake" in str(info.value)


@pytest.mark.usefixtures("bound_sockets")
def test_a_write_the_server_never_reads_is_phase_send() -> None:
    with (
        RawServer(mute) as server,
        pytest.raises(ws.DeadlineExceeded) as info,
        ws.deadline(LIMIT),
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.sendall(b"x" * (64 << 20))
    assert info.value.phase == "send"


@pytest.mark.usefixtures("bound_sockets")
def test_a_connect_nobody_answers_is_phase_connect() -> None:
    with (
        full_accept_queue() as port,
        pytest.raises(ws.DeadlineExceeded) as info,
        ws.deadline(LIMIT),
    ):
        socket.create_connection(("127.0.0.1", port)).close()
    assert info.value.phase == "connect"
    assert "while connecting" in str(info.value)
