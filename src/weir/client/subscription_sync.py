"""The synchronous twin of `weir.client.subscription.SubscriptionConsumer` (`weir.Client.subscribe`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from weir.client import subscription as aio_sub
from weir.client.loop import LoopThread
from weir.client.subscription import MessageRef, ReceivedMessage
from weir.errors import WeirError

log = logging.getLogger("weir.client")


class SubscriptionConsumer:
    """A consumer of a durable subscription; every call runs on the client's loop thread."""

    def __init__(self, inner: aio_sub.SubscriptionConsumer, loop: LoopThread) -> None:
        self._inner = inner
        self._loop = loop
        self._listener: threading.Thread | None = None

    def listen(self, listener: Callable[[SubscriptionConsumer, ReceivedMessage], Any]) -> None:
        """Call ``listener(consumer, message)`` for every message, on a thread of its own
        (so it may call this consumer's blocking methods); it acknowledges what it
        handled. A listener that raises is logged and the message negatively acknowledged."""

        def run() -> None:
            while True:
                try:
                    msg = self.receive(timeout=0.5)
                except WeirError:
                    return  # closed, or failed for good
                if msg is None:
                    continue
                try:
                    listener(self, msg)
                except Exception:
                    log.exception("message listener failed; the message will come again")
                    with contextlib.suppress(WeirError):
                        self.negative_acknowledge(msg)

        self._listener = threading.Thread(target=run, name="weir-listener", daemon=True)
        self._listener.start()

    @property
    def topic(self) -> str:
        return self._inner.topic

    @property
    def subscription(self) -> str:
        return self._inner.subscription

    @property
    def consumer_name(self) -> str:
        return self._inner.consumer_name

    @property
    def ack_requests(self) -> int:
        """Ack requests sent so far (acks made while others are in flight are grouped)."""
        return self._inner.ack_requests

    @property
    def retry_topic(self) -> str:
        """With ``retry_enable``: the retry topic, as its messages name it."""
        return self._inner.retry_topic

    @property
    def server_generation(self) -> int:
        """The generation of the server behind the current stream (one more per restart)."""
        return self._inner.server_generation

    @property
    def connected(self) -> bool:
        return self._inner.connected

    @property
    def reconnects(self) -> int:
        return self._inner.reconnects

    @property
    def last_error(self) -> WeirError | None:
        return self._inner.last_error

    def wait_connected(self, timeout: float | None = 30.0) -> SubscriptionConsumer:
        self._loop.run(self._inner.wait_connected(timeout))
        return self

    def receive(self, timeout: float | None = None) -> ReceivedMessage | None:
        """The next message; None when none came within ``timeout`` seconds."""
        return self._loop.run(self._inner.receive(timeout))

    def receive_batch(
        self, max_messages: int = 100, timeout: float | None = None
    ) -> list[ReceivedMessage]:
        return self._loop.run(self._inner.receive_batch(max_messages, timeout))

    def __iter__(self) -> Iterator[ReceivedMessage]:
        while True:
            msg = self.receive()
            if msg is not None:
                yield msg

    def acknowledge(self, messages: MessageRef | Iterable[MessageRef]) -> None:
        """Acknowledge messages; returns once durable on the server."""
        self._loop.run(self._inner.acknowledge(messages))

    def acknowledge_future(
        self, messages: MessageRef | Iterable[MessageRef]
    ) -> concurrent.futures.Future[None]:
        """Send an acknowledgement and return at once; the future resolves once it is durable."""
        return asyncio.run_coroutine_threadsafe(self._inner.acknowledge(messages), self._loop.loop)

    def acknowledge_cumulative(self, message: MessageRef) -> None:
        self._loop.run(self._inner.acknowledge_cumulative(message))

    def negative_acknowledge(
        self, messages: MessageRef | Iterable[MessageRef], delay: float | dt.timedelta = 0
    ) -> None:
        self._loop.run(self._inner.negative_acknowledge(messages, delay))

    def reconsume_later(
        self, messages: MessageRef | Iterable[MessageRef], delay: float | dt.timedelta
    ) -> None:
        """See `weir.aio.SubscriptionConsumer.reconsume_later`."""
        self._loop.run(self._inner.reconsume_later(messages, delay))

    def seek(
        self,
        offsets: Mapping[int, int] | None = None,
        *,
        timestamp: dt.datetime | int | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        """See `weir.aio.SubscriptionConsumer.seek`."""
        self._loop.run(self._inner.seek(offsets, timestamp=timestamp, timeout=timeout))

    def unsubscribe(self) -> None:
        self._loop.run(self._inner.unsubscribe())

    def close(self, timeout: float | None = 10.0) -> None:
        self._loop.run(self._inner.close(timeout))
        t = self._listener
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def __enter__(self) -> SubscriptionConsumer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
