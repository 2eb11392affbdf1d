"""What a writer is configured with (`WriterSettings`) and what it reports per message
(`WriteResult`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from weir.access_mode import AccessMode
from weir.client.delivery import DEFAULT_DELIVERY_TIMEOUT
from weir.errors import BadRequestError, WeirError
from weir.storage.codecs import Codec


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Where a message went. ``skipped``: the broker already had this seq_no (offset unknown)."""

    partition: int
    offset: int | None
    seq_no: int
    skipped: bool


@dataclass(frozen=True)
class WriterSettings:
    """Writer limits; the defaults suit most producers.

    ``max_message_bytes``: None follows the server's limit (reported when the
    writer connects; 32 MiB until then), a number lowers it. ``delivery_timeout``:
    seconds messages may wait with none acknowledged before the writer gives up
    (None: never). ``on_reconnect(error)``: called in the client's event loop
    each time the writer is about to reconnect (keep it quick; no sync weir calls);
    for the sync client's caller-driven TCP writer (`weir.client.direct_writer`), in
    the thread that drives it.
    ``access_mode``: how the producer shares the topic (`weir.access_mode.AccessMode`;
    a name such as ``"exclusive"`` is accepted). ``chunking``: a message over the message
    size limit is split into chunks that readers put back together (`weir.client.chunks`),
    instead of being refused. ``partitions_refresh_interval``: seconds between a routing
    writer's looks at the topic's partition count (Pulsar's autoUpdatePartitionsInterval,
    60 s too), so keys spread over partitions added while it runs; None: never (it still
    looks again when the broker answers that a partition it routed to is unknown).
    """

    producer_id: str | None = None
    partition: int | None = None
    codec: Codec = Codec.RAW
    max_buffer_messages: int = 200_000
    max_buffer_bytes: int = 64 << 20
    max_batch_messages: int = 50_000
    max_batch_bytes: int = 1 << 20
    max_request_bytes: int = 8 << 20
    max_inflight_requests: int = 4
    linger_ms: float = 0.0
    max_message_bytes: int | None = None
    delivery_timeout: float | None = DEFAULT_DELIVERY_TIMEOUT
    on_reconnect: Callable[[WeirError], None] | None = None
    access_mode: AccessMode = AccessMode.SHARED
    chunking: bool = False
    transaction_id: int = 0  # set by `Transaction.writer`: the messages belong to it
    partitions_refresh_interval: float | None = 60.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "access_mode", AccessMode.parse(self.access_mode))
        for name in (
            "max_buffer_messages",
            "max_buffer_bytes",
            "max_batch_messages",
            "max_batch_bytes",
            "max_request_bytes",
            "max_inflight_requests",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise BadRequestError(f"{name} must be a positive integer, got {v!r}")
        if self.linger_ms < 0:
            raise BadRequestError("linger_ms must be >= 0")
        m = self.max_message_bytes
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m <= 0):
            raise BadRequestError(f"max_message_bytes must be a positive integer, got {m!r}")
        r = self.partitions_refresh_interval
        if r is not None and (isinstance(r, bool) or not isinstance(r, int | float) or not r > 0):
            raise BadRequestError(
                f"partitions_refresh_interval must be > 0 seconds or None, got {r!r}"
            )
        if self.delivery_timeout is not None and not self.delivery_timeout > 0:
            raise BadRequestError(
                f"delivery_timeout must be > 0 seconds or None, got {self.delivery_timeout!r}"
            )


def writer_settings(
    producer_id: str | None,
    partition: int | None,
    codec: str | Codec,
    access_mode: str | AccessMode,
    settings: dict[str, Any],
) -> WriterSettings:
    """`WriterSettings` from ``Client.writer``'s arguments (sync and asyncio alike)."""
    return WriterSettings(
        producer_id=producer_id,
        partition=partition,
        codec=Codec.parse(codec),
        access_mode=AccessMode.parse(access_mode),
        **settings,
    )
