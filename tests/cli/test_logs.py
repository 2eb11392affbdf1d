"""Structured logs: one line per event, the event's ids as fields, JSON on request."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from weir import logs


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    """logs.configure rewires the root logger: give it back as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def capture(json_lines: bool) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    logs.configure("debug", json_lines, stream)
    return logging.getLogger("weir.test"), stream


def test_json_lines_carry_the_event_fields_and_keep_tracebacks_on_one_line() -> None:
    log, stream = capture(json_lines=True)
    log.info("session opened", extra={"topic": "orders", "partition": 2, "session": "ab12"})
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        log.exception("read failed", extra={"session": "ab12"})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["msg"] == "session opened" and first["level"] == "info"
    assert (first["topic"], first["partition"], first["session"]) == ("orders", 2, "ab12")
    assert second["level"] == "error" and "ValueError: boom" in second["exc"]


def test_text_lines_put_fields_after_the_message() -> None:
    log, stream = capture(json_lines=False)
    log.warning("writes refused", extra={"topic": "orders", "reason": "over loaded"})
    (line,) = stream.getvalue().splitlines()
    assert line.endswith('WARNING weir.test writes refused topic=orders reason="over loaded"')


def test_refusals_are_logged_once_per_interval_with_a_count() -> None:
    log, stream = capture(json_lines=True)
    observer = logs.LogObserver(log, interval=3600)
    for _ in range(5):
        observer.on_refused("public/default/orders", 1, "overloaded")
    observer.on_refused("public/default/orders", 0, "overloaded")
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["topic"], e["partition"], e["count"]) for e in events] == [
        ("orders", 1, 1),
        ("orders", 0, 1),
    ]
