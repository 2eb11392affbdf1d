"""What the console's pages show, read from the live broker in the server's process.

Plain data for the templates: no HTML here (the templates escape every value), and no
protocol either: the console runs inside `weir serve` and calls the broker directly,
the way the native front does.
"""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from weir.broker.topics import short_topic
from weir.errors import BadRequestError
from weir.storage.batch import BatchHeader, decode_payload, iter_batches
from weir.storage.batch_encoding import encode_batch
from weir.storage.codecs import Codec
from weir.storage.incoming import validate_incoming

if TYPE_CHECKING:
    from weir.broker.broker import Broker
    from weir.broker.topics import TopicConfig

PAGE_SIZE = 20
MAX_PAGE = 200
SHOWN_BYTES = 4096  # of one value or key; the rest is cut with a note
MAX_TEST_MESSAGE_BYTES = 1 << 20
MAX_READ_BYTES = 4 << 20  # stored bytes walked for one page


def human_bytes(n: float | None) -> str:
    if n is None:
        return "none"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def human_ms(ms: int | None) -> str:
    if ms is None:
        return "forever"
    s = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size and s % size == 0:
            return f"{int(s // size)}{unit}"
    return f"{s:g}s"


def timestamp(ms: int) -> str:
    """UTC, to the millisecond; empty for 0 (never)."""
    if ms <= 0:
        return ""
    t = time.gmtime(ms / 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", t) + f".{ms % 1000:03d}Z"


# ---------------------------------------------------------------------------- topics

SPARK_WIDTH, SPARK_HEIGHT = 120, 24


@dataclass(frozen=True)
class Sparkline:
    """An SVG polyline's points for a small write-rate chart, and its last value."""

    points: str
    last: float
    peak: float


def sparkline(values: list[float]) -> Sparkline:
    if not values:
        return Sparkline("", 0.0, 0.0)
    peak = max(values)
    scale = (SPARK_HEIGHT - 2) / peak if peak > 0 else 0.0
    step = SPARK_WIDTH / max(1, len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{SPARK_HEIGHT - 1 - v * scale:.1f}" for i, v in enumerate(values)
    )
    return Sparkline(points, values[-1], peak)


@dataclass(frozen=True)
class TopicRow:
    name: str
    partitions: int
    messages: int
    size_bytes: int
    retention: str
    consumers: int
    last_write: str


def _everything(_: str) -> bool:
    return True


def topic_rows(broker: Broker, visible: Callable[[str], bool] = _everything) -> list[TopicRow]:
    """The topics ``visible`` (by canonical name) lets the page list."""
    out = []
    for cfg in broker.list_topics():
        if not visible(cfg.name):
            continue
        parts = broker.partitions(cfg.name)
        out.append(
            TopicRow(
                name=short_topic(cfg.name),
                partitions=cfg.partitions,
                messages=sum(p.end_offset - p.start_offset for p in parts),
                size_bytes=sum(p.size_bytes for p in parts),
                retention=retention_text(cfg),
                consumers=len(cfg.consumers),
                last_write=timestamp(max((p.last_write_ms for p in parts), default=0)),
            )
        )
    return out


def retention_text(cfg: TopicConfig) -> str:
    by_bytes = f", {human_bytes(cfg.retention_bytes)} per partition" if cfg.retention_bytes else ""
    return human_ms(cfg.retention_ms) + by_bytes


@dataclass(frozen=True)
class PartitionRow:
    partition: int
    start_offset: int
    end_offset: int
    size_bytes: int
    last_write: str
    producers: int
    write_rate: float  # messages per second over the last sample


@dataclass(frozen=True)
class ProducerRow:
    partition: int
    producer_id: str
    max_seq_no: int
    offset: int
    last_write: str


@dataclass(frozen=True)
class ConsumerLag:
    topic: str
    consumer: str
    important: bool
    total_lag: int
    partitions: list[tuple[int, int, int, int]]  # partition, committed, end, lag


@dataclass(frozen=True)
class TopicDetail:
    name: str
    config: TopicConfig
    retention: str
    partitions: list[PartitionRow]
    producers: list[ProducerRow]
    producers_total: int
    consumers: list[ConsumerLag]


MAX_PRODUCER_ROWS = 200


def topic_detail(
    broker: Broker,
    name: str,
    rates: Mapping[tuple[str, str], float] | None = None,
    *,
    with_consumers: bool = True,
) -> TopicDetail:
    """``rates``: messages written per second by (topic, partition), from the history;
    ``with_consumers`` False leaves the consumers out (a viewer without consume)."""
    cfg = broker.topic(name)
    short = short_topic(cfg.name)
    rows, producers = [], []
    total = 0
    for info in broker.partitions(cfg.name):
        table = (
            broker.actor(cfg.name, info.partition).log.producers
            if cfg.kind == "persistent"
            else {}  # a non-persistent topic keeps no producer state
        )
        total += len(table)
        rows.append(
            PartitionRow(
                info.partition,
                info.start_offset,
                info.end_offset,
                info.size_bytes,
                timestamp(info.last_write_ms),
                len(table),
                (rates or {}).get((short, str(info.partition)), 0.0),
            )
        )
        for pid, st in table.items():
            producers.append(
                ProducerRow(
                    info.partition, pid, st.max_seq_no, st.offset, timestamp(st.last_write_ms)
                )
            )
    producers.sort(key=lambda r: r.last_write, reverse=True)
    return TopicDetail(
        name=short_topic(cfg.name),
        config=cfg,
        retention=retention_text(cfg),
        partitions=rows,
        producers=producers[:MAX_PRODUCER_ROWS],
        producers_total=total,
        consumers=[consumer_lag(broker, cfg, c) for c in sorted(cfg.consumers)]
        if with_consumers
        else [],
    )


def consumer_lag(broker: Broker, cfg: TopicConfig, consumer: str) -> ConsumerLag:
    parts = broker.describe_consumer(cfg.name, consumer)
    return ConsumerLag(
        topic=short_topic(cfg.name),
        consumer=consumer,
        important=cfg.consumers[consumer].important,
        total_lag=sum(p.lag for p in parts),
        partitions=[(p.partition, p.committed_offset, p.end_offset, p.lag) for p in parts],
    )


def all_consumers(
    broker: Broker, visible: Callable[[str], bool] = _everything
) -> list[ConsumerLag]:
    """Every consumer of every topic ``visible`` allows, most behind first."""
    out = [
        consumer_lag(broker, cfg, c)
        for cfg in broker.list_topics()
        if visible(cfg.name)
        for c in cfg.consumers
    ]
    out.sort(key=lambda c: (-c.total_lag, c.topic, c.consumer))
    return out


# ---------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class Shown:
    """A key or value as the page shows it: ``kind`` is text, json, hex or empty."""

    kind: str
    text: str
    size: int
    cut: bool = False


def show_bytes(raw: bytes, limit: int = SHOWN_BYTES) -> Shown:
    """Text when it is UTF-8 (JSON pretty-printed), else hex; at most ``limit`` bytes shown."""
    if not raw:
        return Shown("empty", "", 0)
    cut = len(raw) > limit
    part = raw[:limit]
    text = _utf8(part, cut)
    if text is None:
        return Shown("hex", part.hex(" "), len(raw), cut)
    if not cut and text.lstrip()[:1] in ("{", "["):
        try:
            return Shown(
                "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False), len(raw)
            )
        except ValueError:
            pass
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return Shown("hex", part.hex(" "), len(raw), cut)
    return Shown("text", text, len(raw), cut)


def _utf8(part: bytes, cut: bool) -> str | None:
    """``part`` as UTF-8, or None; a cut may split the last character (up to 3 bytes)."""
    for drop in range(4 if cut else 1):
        try:
            return part[: len(part) - drop].decode()
        except UnicodeDecodeError:
            continue
    return None


@dataclass(frozen=True)
class MessageRow:
    offset: int
    seq_no: int
    producer_id: str
    created: str
    written: str
    key: Shown
    value: Shown
    headers: list[tuple[str, str]]
    data_codec: str


@dataclass
class MessagePage:
    topic: str
    partition: int
    partitions: int
    start_offset: int
    end_offset: int
    offset: int  # the first offset asked for
    limit: int
    rows: list[MessageRow] = field(default_factory=list)

    @property
    def prev_offset(self) -> int | None:
        return (
            None
            if self.offset <= self.start_offset
            else max(self.start_offset, self.offset - self.limit)
        )

    @property
    def next_offset(self) -> int | None:
        nxt = self.rows[-1].offset + 1 if self.rows else self.offset + self.limit
        return nxt if nxt < self.end_offset else None


def parse_time(text: str) -> int:
    """ms since epoch from ``YYYY-MM-DDTHH:MM[:SS]`` (UTC, as the page shows times) or ms."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        try:
            return calendar.timegm(time.strptime(text.rstrip("Z"), fmt)) * 1000
        except ValueError:
            continue
    raise BadRequestError(f"bad time {text!r}: expected YYYY-MM-DDTHH:MM[:SS] (UTC)")


def browse(
    broker: Broker,
    topic: str,
    partition: int,
    offset: int | None = None,
    at_ms: int | None = None,
    limit: int = PAGE_SIZE,
    *,
    read: bool = True,
) -> MessagePage:
    """One page of messages from ``offset`` (or the first written at/after ``at_ms``; by
    default the last page of the partition); ``read`` False: the partition's offsets
    only, no message (for a viewer who may write but not read)."""
    cfg = broker.topic(topic)
    actor = broker.actor(cfg.name, partition)
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequestError(f"page size must be 1 to {MAX_PAGE}, got {limit}")
    start, end = actor.start_offset, actor.end_offset
    if at_ms is not None and read:
        offset = actor.log.offset_for_time(at_ms)
    elif offset is None:
        offset = max(start, end - limit)
    if offset < 0:
        raise BadRequestError(f"offset must not be negative, got {offset}")
    offset = max(offset, start)
    page = MessagePage(short_topic(cfg.name), partition, cfg.partitions, start, end, offset, limit)
    if not read:
        return page
    pos, stop, walked = offset, min(end, offset + limit), 0
    while pos < stop and walked < MAX_READ_BYTES:
        res = actor.read(pos, 1 << 20, stop)
        if not res.chunks or res.next_offset <= pos:
            break
        for chunk in res.chunks:
            walked += len(chunk)
            for bpos, h in iter_batches(chunk):
                if h.next_offset <= pos:
                    continue
                page.rows.extend(_rows(chunk, bpos, h, pos, stop))
        pos = res.next_offset
    return page


def _rows(
    chunk: bytes | memoryview, bpos: int, h: BatchHeader, lo: int, hi: int
) -> list[MessageRow]:
    p = decode_payload(chunk, bpos, h)
    hd = p.header
    c = p.columns()
    codec = "" if hd.data_codec == Codec.RAW else _codec_name(hd.data_codec)
    out = []
    for i in range(hd.record_count):
        off = hd.base_offset + i
        if not lo <= off < hi:
            continue
        out.append(
            MessageRow(
                offset=off,
                seq_no=c.seq_nos[i],
                producer_id=hd.producer_id,
                created=timestamp(c.created_at[i]),
                written=timestamp(hd.written_at),
                key=show_bytes(c.keys[i]),
                value=show_bytes(c.data[i]),
                headers=sorted(c.headers[i].items()),
                data_codec=codec,
            )
        )
    return out


def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return str(codec)


def parse_headers(text: str) -> dict[str, str]:
    """``name=value`` lines (blank lines skipped) as a header dict."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise BadRequestError(f"header line {n}: expected name=value, got {line[:60]!r}")
        out[name.strip()] = value
    return out


async def write_test_message(
    broker: Broker, topic: str, partition: int, key: str, value: str, headers: dict[str, str]
) -> int:
    """Store one message (no producer id: never deduplicated); returns its offset."""
    data, kb = value.encode(), key.encode()
    if len(data) + len(kb) > MAX_TEST_MESSAGE_BYTES:
        raise BadRequestError(
            f"a test message is at most {human_bytes(MAX_TEST_MESSAGE_BYTES)} (key and value)"
        )
    buf = encode_batch([data], keys=[kb], headers=[headers], created_at=int(time.time() * 1000))
    results = await broker.write(topic, partition, validate_incoming([buf]))
    return results[0].offset
