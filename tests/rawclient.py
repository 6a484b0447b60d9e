"""A raw socket client for the FaultGateway's tests: one POST, bounded reads, the bytes as sent."""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Dict, List, Tuple


class Raw:
    """A raw socket client: sends one POST to ``{base}{path}``, reads bytes with bounded waits."""

    def __init__(
        self,
        base: str,
        body: Any,
        *,
        path: str = "/chat/completions",
        close: bool = True,
        headers: str = "",
    ) -> None:
        host, port = base.split("//", 1)[1].split("/", 1)[0].split(":")
        target = "/" + base.split("//", 1)[1].split("/", 1)[1] + path
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.sock = socket.create_connection((host, int(port)), timeout=2)
        connection = "Connection: close\r\n" if close else ""
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"{connection}{headers}Content-Length: {len(payload)}\r\n\r\n"
        )
        self.request = head.encode() + payload
        self.sock.sendall(self.request)

    def read_all(self, timeout: float = 5.0) -> bytes:
        """Everything until the server closes (fails the test if it takes over ``timeout``)."""
        data = bytearray()
        give_up = time.monotonic() + timeout
        while time.monotonic() < give_up:
            piece = self.sock.recv(65536)
            if not piece:
                return bytes(data)
            data += piece
        raise AssertionError(f"the server did not close within {timeout}s")

    def read_for(self, seconds: float) -> Tuple[bytes, bool]:
        """What arrives within ``seconds``, and whether the server closed meanwhile."""
        data = bytearray()
        give_up = time.monotonic() + seconds
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                return bytes(data), False
            self.sock.settimeout(left)
            try:
                piece = self.sock.recv(65536)
            except socket.timeout:
                return bytes(data), False
            if not piece:
                return bytes(data), True
            data += piece

    def read_until_reset(self) -> Tuple[bytes, bool]:
        """What arrives before the connection ends, and whether it ended with a reset."""
        data = bytearray()
        try:
            while True:
                piece = self.sock.recv(65536)
                if not piece:
                    return bytes(data), False
                data += piece
        except ConnectionResetError:
            return bytes(data), True

    def close(self) -> None:
        self.sock.close()


def split_response(data: bytes) -> Tuple[str, Dict[str, str], bytes]:
    """The status line, the headers (lower-cased names) and the body of a raw response."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body


def http_chunks(body: bytes) -> Tuple[List[bytes], bool]:
    """Decode a chunked body: the chunks, and whether the terminating 0-chunk arrived."""
    chunks = []
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks, True
        chunks.append(rest[:size])
        assert rest[size : size + 2] == b"\r\n"
        body = rest[size + 2 :]
    return chunks, False
