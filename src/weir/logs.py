"""Structured logs: one line per event, as text or JSON, with the event's ids as fields.

Code attaches ids with ``extra``: ``log.info("topic created", extra={"topic": name})``.
The formatters write every such field (topic, partition, session, consumer, ...)
after the message as ``key=value``, or as keys of the JSON object, so a log
search can filter on them. A traceback stays on its event's line (newlines
escaped), so one line is always one event.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import threading
import time
from typing import IO, Any

from weir.broker.observer import BrokerObserver
from weir.broker.topics import short_topic

_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller attached with ``extra``."""
    return {
        k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS and not k.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    t = dt.datetime.fromtimestamp(record.created, dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _text_value(value: object) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


class TextFormatter(logging.Formatter):
    """``2026-01-02T03:04:05.678Z INFO weir.broker topic created topic=orders partitions=3``."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        parts += [f"{k}={_text_value(v)}" for k, v in event_fields(record).items()]
        if record.exc_info:
            parts.append("exc=" + json.dumps(self.formatException(record.exc_info)))
        return " ".join(parts).replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the event's fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in event_fields(record).items():
            doc.setdefault(k, v)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def configure(level: str = "info", json_lines: bool = False, stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (stderr) as one line of text or JSON."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


class LogObserver(BrokerObserver):
    """Logs the broker events an operator acts on.

    Refused writes are warnings, at most one per partition and reason every
    ``interval`` seconds (with the count since the last one), so an overload
    does not flood the log; commits and consumer offsets are debug events.
    """

    def __init__(self, logger: logging.Logger | None = None, interval: float = 10.0) -> None:
        self.log = logger or logging.getLogger("weir.events")
        self.interval = interval
        self._refusals: dict[tuple[str, int, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def on_refused(self, topic: str, partition: int, reason: str) -> None:
        key = (topic, partition, reason)
        now = time.monotonic()
        with self._lock:
            last, count = self._refusals.get(key, (-self.interval, 0))
            count += 1
            if now - last < self.interval:
                self._refusals[key] = (last, count)
                return
            self._refusals[key] = (now, 0)
        self.log.warning(
            "writes refused",
            extra={
                "topic": short_topic(topic),
                "partition": partition,
                "reason": reason,
                "count": count,
            },
        )

    def on_write(self, topic: str, partition: int, records: int, nbytes: int, skipped: int) -> None:
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "write committed",
                extra={
                    "topic": short_topic(topic),
                    "partition": partition,
                    "records": records,
                    "bytes": nbytes,
                    "skipped": skipped,
                },
            )

    def on_commit(self, jobs: int, nbytes: int, seconds: float) -> None:
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "group commit",
                extra={"jobs": jobs, "bytes": nbytes, "ms": round(seconds * 1000, 3)},
            )

    def on_consumer_commit(self, topic: str, partition: int, consumer: str, offset: int) -> None:
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "consumer offset committed",
                extra={
                    "topic": short_topic(topic),
                    "partition": partition,
                    "consumer": consumer,
                    "offset": offset,
                },
            )
