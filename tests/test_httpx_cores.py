"""httpcore's classes found once per library, and ``None`` where its names moved."""

import logging
import types
from typing import List, Tuple

import httpx
import httpx2
import pytest

from .internals import ClassLookup

pytestmark = pytest.mark.timeout(10)


def test_the_finder_runs_once_per_library_with_its_httpcore() -> None:
    calls: List[Tuple[str, str]] = []

    def find(name: str, core: str) -> str:
        calls.append((name, core))
        return f"classes of {core}"

    lookup = ClassLookup(find, "nothing")
    assert lookup(httpx2) == "classes of httpcore2"
    assert lookup(httpx) == "classes of httpcore"
    assert lookup(httpx2) == "classes of httpcore2"
    assert calls == [("httpx2", "httpcore2"), ("httpx", "httpcore")]


@pytest.mark.parametrize("error", [ImportError("no module named x"), AttributeError("gone")])
def test_moved_names_give_none_logged_once_and_kept(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    calls: List[str] = []

    def find(name: str, core: str) -> str:
        calls.append(name)
        raise error

    lookup = ClassLookup(find, "its streams keep a thread")
    with caplog.at_level(logging.DEBUG, logger="watchdog_sync"):
        assert lookup(httpx2) is None
        assert lookup(httpx2) is None
    assert calls == ["httpx2"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "httpx2's httpcore has moved" in messages[0]
    assert "its streams keep a thread" in messages[0]


def test_a_library_that_is_not_httpx_is_never_looked_into() -> None:
    def find(name: str, core: str) -> str:
        raise AssertionError("not called for an unknown library")

    lookup = ClassLookup(find, "nothing")
    assert lookup(types.ModuleType("requests")) is None
    assert lookup(object()) is None


def test_an_error_that_is_not_a_moved_name_is_not_hidden() -> None:
    def find(name: str, core: str) -> str:
        raise RuntimeError("a bug in the finder")

    lookup = ClassLookup(find, "nothing")
    with pytest.raises(RuntimeError, match="a bug in the finder"):
        lookup(httpx2)
