"""The `watchdog-sync gateway` command: foreground server, URLs printed, clean stop on signals."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Optional

import pytest
import requests
import urllib3

from watchdog_sync.cli import main
from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(30)

STARTUP_SECONDS = 10.0  # a cold interpreter start on a loaded 2-core machine


def read_urls(
    proc: subprocess.Popen[bytes],
    anthropic: Optional[Dict[str, str]] = None,
    gemini: Optional[Dict[str, str]] = None,
    printed: Optional[List[str]] = None,
) -> Dict[str, str]:
    """Read the command's output until every scenario's URL is printed (bounded).

    Returns the OpenAI base URLs; fills ``anthropic`` and ``gemini`` with the others and
    ``printed`` with every line read.
    """
    assert proc.stdout is not None
    wanted = set(FaultGateway.scenarios())
    urls: Dict[str, str] = {}
    buffer = b""
    give_up = time.monotonic() + STARTUP_SECONDS
    while not wanted <= set(urls):
        left = give_up - time.monotonic()
        assert left > 0, f"the command printed only {buffer!r}"
        if select.select([proc.stdout], [], [], left)[0]:
            piece = os.read(proc.stdout.fileno(), 65536)
            assert piece, f"the command exited early: {buffer!r}"
            buffer += piece
        for line in buffer.decode().splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[0] in wanted and fields[1].startswith("http://"):
                urls[fields[0]] = fields[1]
                for column, found in ((2, anthropic), (3, gemini)):
                    url = fields[column] if len(fields) > column else ""
                    if found is not None and url.startswith("http://"):
                        found[fields[0]] = url
    if printed is not None:
        printed.extend(buffer.decode().splitlines())
    return urls


@pytest.fixture
def command() -> Iterator[subprocess.Popen[bytes]]:
    """`watchdog-sync gateway` in a subprocess; killed if the test leaves it running."""
    with subprocess.Popen(
        [sys.executable, "-m", "watchdog_sync.cli", "gateway", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_gateway_command_serves_every_scenario_and_stops_on_sigint(
    command: subprocess.Popen[bytes],
) -> None:
    urls = read_urls(command)
    assert all(url.startswith("http://127.0.0.1:") and url.endswith("/v1") for url in urls.values())
    response = requests.post(
        urls["ok"] + "/chat/completions",
        json={"messages": [], "stream": True},
        headers={"Connection": "close"},
        timeout=(2, 2),
    )
    assert response.content.rstrip().endswith(b"data: [DONE]")
    command.send_signal(signal.SIGINT)
    assert command.wait(5) == 0
    assert command.stdout is not None and command.stderr is not None
    assert b"stopped" in command.stdout.read()
    assert command.stderr.read() == b""


def test_gateway_command_prints_an_anthropic_url_per_scenario(
    command: subprocess.Popen[bytes],
) -> None:
    anthropic: Dict[str, str] = {}
    urls = read_urls(command, anthropic)
    assert set(anthropic) == set(urls)
    assert all(not url.endswith("/v1") for url in anthropic.values())
    response = requests.post(
        anthropic["ok"] + "/v1/messages",
        json={"messages": [], "max_tokens": 8, "stream": True},
        headers={"Connection": "close"},
        timeout=(2, 2),
    )
    assert response.content.rstrip().endswith(b'data: {"type":"message_stop"}')
    command.send_signal(signal.SIGTERM)
    assert command.wait(5) == 0


def test_gateway_command_prints_a_gemini_url_per_scenario(
    command: subprocess.Popen[bytes],
) -> None:
    """The third URL of each scenario speaks the Gemini API (google-genai's base_url)."""
    gemini: Dict[str, str] = {}
    urls = read_urls(command, gemini=gemini)
    assert set(gemini) == set(urls)
    response = requests.post(
        gemini["ok"] + "/v1beta/models/any:streamGenerateContent?alt=sse",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers={"Connection": "close"},
        timeout=(2, 2),
    )
    assert b'"finishReason":"STOP"' in response.content.replace(b" ", b"")
    command.send_signal(signal.SIGTERM)
    assert command.wait(5) == 0


def test_gateway_command_lists_and_serves_the_legacy_completions_route(
    command: subprocess.Popen[bytes],
) -> None:
    printed: List[str] = []
    urls = read_urls(command, printed=printed)
    assert any("{base_url}/completions" in line for line in printed[:3])
    response = requests.post(
        urls["ok"] + "/completions",
        json={"prompt": "hi", "stream": True},
        headers={"Connection": "close"},
        timeout=(2, 2),
    )
    assert b'"object":"text_completion"' in response.content
    assert response.content.rstrip().endswith(b"data: [DONE]")
    command.send_signal(signal.SIGTERM)
    assert command.wait(5) == 0


def test_gateway_command_stops_on_sigterm_while_holding_a_connection(
    command: subprocess.Popen[bytes],
) -> None:
    urls = read_urls(command)
    with requests.post(
        urls["silent_after_200"] + "/chat/completions",
        json={"messages": [], "stream": True},
        headers={"Connection": "close"},
        stream=True,
        timeout=(2, 5),
    ) as response:
        assert response.status_code == 200
        started = time.monotonic()
        command.send_signal(signal.SIGTERM)
        assert command.wait(5) == 0
        assert time.monotonic() - started < 3.0
        with pytest.raises(urllib3.exceptions.ProtocolError):
            response.raw.read()  # the server closed the held stream mid-body


def test_gateway_refuses_a_remote_host_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gateway", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--allow-remote" in err


def test_gateway_reports_a_port_in_use_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with FaultGateway() as busy:
        assert main(["gateway", "--port", str(busy.port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("watchdog-sync gateway: error: cannot serve on 127.0.0.1:")
    assert err.count("\n") == 1


def test_gateway_rejects_an_out_of_range_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gateway", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


def test_gateway_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["gateway", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--port" in out and "--host" in out and "SIGTERM" in out
    assert all(api in " ".join(out.split()) for api in ("OpenAI", "Anthropic", "Gemini"))


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["probe", "--help"]])
def test_the_help_is_plain_text_and_names_every_api(
    capsys: pytest.CaptureFixture[str], argv: List[str]
) -> None:
    """--help shows no reStructuredText markup; the command's names every gateway API."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":class:" not in out
    if argv == ["--help"]:
        text = " ".join(out.split())
        assert all(api in text for api in ("OpenAI", "Anthropic", "Gemini"))
