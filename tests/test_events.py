"""Structured events reach listeners and the logger; a raising listener is skipped."""

from __future__ import annotations

import logging

import pytest

from watchdog_sync import Event, add_listener

from .internals import context_with_fields, emit, event_fields

pytestmark = pytest.mark.timeout(10)


def test_listeners_receive_events_until_unregistered() -> None:
    seen: list[Event] = []
    unregister = add_listener(seen.append)
    emit(Event("attempt_start", attempt=1, stage="s"))
    unregister()
    emit(Event("attempt_start", attempt=2))
    assert [e.attempt for e in seen] == [1]


def test_events_are_logged_with_their_fields_as_extra(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="watchdog_sync")
    emit(Event("backoff", request_id="r1", attempt=2, delay_ms=150.0))
    record = caplog.records[-1]
    assert record.event == "backoff"  # type: ignore[attr-defined]
    assert record.request_id == "r1"  # type: ignore[attr-defined]
    assert record.delay_ms == 150.0  # type: ignore[attr-defined]


def test_a_raising_listener_never_breaks_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    def bad(event: Event) -> None:
        raise RuntimeError("listener bug")

    seen: list[Event] = []
    unregister_bad = add_listener(bad)
    unregister_good = add_listener(seen.append)
    try:
        emit(Event("give_up"))
    finally:
        unregister_bad()
        unregister_good()
    assert len(seen) == 1
    assert any("listener raised" in r.getMessage() for r in caplog.records)


def test_event_fields_fill_what_the_event_left_empty() -> None:
    seen: list[Event] = []
    unregister = add_listener(seen.append)
    try:
        with event_fields(request_id="outer", model="m1"), event_fields(request_id="inner"):
            emit(Event("attempt_start"))
            emit(Event("attempt_start", model="explicit"))
        emit(Event("after"))
    finally:
        unregister()
    assert [(e.request_id, e.model) for e in seen] == [
        ("inner", "m1"),
        ("inner", "explicit"),
        (None, None),
    ]


def test_a_context_with_fields_fills_events_run_in_it_and_leaves_the_caller_alone() -> None:
    seen: list[Event] = []
    unregister = add_listener(seen.append)
    try:
        with event_fields(model="m1"):
            context = context_with_fields(request_id="r1")
        context.run(emit, Event("attempt_start"))
        emit(Event("outside"))
    finally:
        unregister()
    assert [(e.request_id, e.model) for e in seen] == [("r1", "m1"), (None, None)]
