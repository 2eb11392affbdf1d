"""The console's subscription pages: what they show and the admin actions they send.

Numbers come from the broker's own `describe_subscription` / `list_subscriptions`, the
calls behind `weir subscription list|describe` and the SDK, so the page and the CLI
agree. The actions (seek, skip, delete) are the broker's, checked with the consume
permission as the native front checks them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weir.broker.subscriptions import SubscriptionInfo
from weir.broker.topics import short_topic
from weir.console.views import parse_time, timestamp
from weir.errors import BadRequestError, WeirError

if TYPE_CHECKING:
    from weir.broker.broker import Broker


@dataclass(frozen=True)
class SubscriptionRow:
    """One line of a subscription list (as `weir subscription list` prints it)."""

    topic: str
    name: str
    type: str
    consumer: bool  # a registered consumer's committed offsets
    backlog: int
    unacked: int
    consumers: int
    rate_out: float
    rate_redeliver: float
    ack_rate: float


def row(info: SubscriptionInfo) -> SubscriptionRow:
    return SubscriptionRow(
        topic=info.topic,
        name=info.name,
        type=info.type.value,
        consumer=info.consumer,
        backlog=info.backlog,
        unacked=info.unacked,
        consumers=len(info.consumers),
        rate_out=info.msg_rate_out,
        rate_redeliver=info.msg_rate_redeliver,
        ack_rate=info.ack_rate,
    )


def subscription_rows(
    broker: Broker, topic: str | None, visible: Callable[[str], bool]
) -> list[SubscriptionRow]:
    """The subscriptions of ``topic`` (None: of every topic ``visible`` allows), most
    backlog first."""
    names: Iterable[str] = (
        [topic] if topic is not None else [c.name for c in broker.list_topics() if visible(c.name)]
    )
    out: list[SubscriptionRow] = []
    for name in names:
        try:
            infos = broker.list_subscriptions(name)
        except WeirError:
            if topic is not None:
                raise
            continue  # dropped meanwhile
        out.extend(row(i) for i in infos)
    out.sort(key=lambda r: (-r.backlog, r.topic, r.name))
    return out


@dataclass(frozen=True)
class SubscriptionDetail:
    info: SubscriptionInfo
    type: str
    created: str
    partitions: int


def subscription_detail(broker: Broker, topic: str, name: str) -> SubscriptionDetail:
    cfg = broker.topic(topic)
    info = broker.describe_subscription(cfg.name, name)
    return SubscriptionDetail(
        info=info,
        type=info.type.value,
        created=timestamp(info.created_at_ms),
        partitions=cfg.partitions,
    )


def _partitions(broker: Broker, topic: str, chosen: str) -> list[int]:
    cfg = broker.topic(topic)
    chosen = chosen.strip()
    if chosen in ("", "all"):
        return list(range(cfg.partitions))
    p = _number(chosen, "partition")
    broker.actor(cfg.name, p)  # range check: a clear error for a partition that is not there
    return [p]


def _number(text: str, what: str) -> int:
    try:
        n = int(text.strip())
    except ValueError:
        raise BadRequestError(f"{what} must be a whole number, got {text[:40]!r}") from None
    if n < 0:
        raise BadRequestError(f"{what} must not be negative, got {n}")
    return n


async def seek(broker: Broker, topic: str, name: str, to: str, partition: str) -> str:
    """Move the cursor: ``earliest``, ``latest``, ``time:...`` (every partition chosen to
    its first message at/after it) or an offset; returns what was done, for the page."""
    to = to.strip()
    parts = _partitions(broker, topic, partition)
    cfg = broker.topic(topic)
    if to.startswith("time:"):
        ms = parse_time(to[5:])
        offsets = {p: broker.actor(cfg.name, p).log.offset_for_time(ms) for p in parts}
    elif to == "earliest":
        offsets = {p: broker.actor(cfg.name, p).start_offset for p in parts}
    elif to == "latest":
        offsets = {p: broker.actor(cfg.name, p).end_offset for p in parts}
    elif to:
        offset = _number(to, "offset")
        offsets = {p: offset for p in parts}
    else:
        raise BadRequestError("seek to: earliest, latest, an offset or time:YYYY-MM-DDTHH:MM")
    await broker.seek_subscription(cfg.name, name, offsets=offsets)
    return f"moved subscription {name} of {short_topic(cfg.name)} to {to}"


async def skip(broker: Broker, topic: str, name: str, count: str, partition: str) -> str:
    """Acknowledge the ``count`` oldest unacknowledged messages (``all``: the backlog)."""
    count = count.strip()
    n = None if count == "all" else _number(count, "count")
    chosen = partition.strip()
    p = None if chosen in ("", "all") else _partitions(broker, topic, chosen)[0]
    skipped = await broker.skip_subscription(topic, name, n, partition=p)
    return f"skipped {skipped} message(s) of subscription {name}"


async def delete(broker: Broker, topic: str, name: str, confirm: str, force: bool) -> str:
    if confirm != name:
        raise BadRequestError(f"type the subscription's name ({name}) to confirm deleting it")
    await broker.delete_subscription(topic, name, force=force)
    return f"deleted subscription {name} of {topic}"
