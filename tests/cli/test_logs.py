"""Structured logs: one line per event, the event's ids as fields, JSON on request."""

from __future__ import annotations

import ast
import io
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, ServerProcess
from weir import logs
from weir.client.sync import Client


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


def _log_calls(tree: ast.AST) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"debug", "info", "warning", "error", "exception", "critical"}
        and isinstance(node.func.value, ast.Name | ast.Attribute)
        and "log" in ast.unparse(node.func.value).lower()
    ]


def test_no_log_call_puts_a_field_in_its_text_too() -> None:
    """``log.info("topic created: %s", name, extra={"topic": name})`` printed the topic twice."""
    repeats = []
    for path in sorted((ROOT / "src" / "weir").rglob("*.py")):
        for call in _log_calls(ast.parse(path.read_text())):
            extra = next((k.value for k in call.keywords if k.arg == "extra"), None)
            if not isinstance(extra, ast.Dict):
                continue
            fields = {ast.dump(v) for v in extra.values}
            text = call.args[0] if call.args else None
            formatted = [ast.dump(a) for a in call.args[1:]]
            if any(f in fields for f in formatted) or (
                isinstance(text, ast.Constant) and "=%" in str(text.value)
            ):
                repeats.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert not repeats, repeats


def test_a_servers_log_lines_say_each_field_once(
    shared_server: ServerProcess, topic_name: str
) -> None:
    with Client(shared_server.endpoint) as client:
        client.create_topic(topic_name, 2)
        client.alter_topic(topic_name, partitions=3)
        client.drop_topic(topic_name)
    deadline = time.monotonic() + 30
    while not any(f"topic dropped topic={topic_name}" in x for x in shared_server.log):
        assert time.monotonic() < deadline, "".join(shared_server.log[-20:])
        time.sleep(0.05)
    mine = [x.split(" ", 3)[3].strip() for x in shared_server.log if f"={topic_name}" in x]
    assert mine == [
        f"topic created topic={topic_name} partitions=2",
        f"topic altered topic={topic_name} changed=partitions",
        f"topic dropped topic={topic_name}",
    ]
    (opened,) = [x for x in shared_server.log if " broker open " in x]
    fields = opened.split(" broker open ", 1)[1].split()
    assert [f.split("=")[0] for f in fields] == ["data_dir", "generation", "topics", "partitions"]


def test_json_lines_carry_data_dir_and_generation_as_keys(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--log-json")
    srv.start()
    assert srv.stop() == 0
    events = [json.loads(line) for line in srv.log]
    (opened,) = [e for e in events if e["msg"] == "broker open"]
    assert opened["data_dir"] == str(tmp_path / "data") and opened["generation"] == 1
    listening = next(e for e in events if e["msg"].startswith("weir listening on "))
    assert listening["endpoint"] == srv.endpoint and listening["data_dir"] == opened["data_dir"]
