"""The watchdog-sync command."""

from __future__ import annotations

import pytest

from watchdog_sync.cli import main

pytestmark = pytest.mark.timeout(30)


def test_demo_exits_zero_and_shows_the_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "deadline_exceeded" in out or "deadline" in out
    assert "swallowed: 0" in out
