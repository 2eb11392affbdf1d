"""`weir read TOPIC --subscription NAME`: print what a durable subscription delivers and
acknowledge each printed batch (durably) before taking the next.

Several of these can share a subscription (``--type shared`` or ``key_shared``). Without
``--follow`` the read ends once nothing is left that this reader could get: the backlog
is empty, or what remains is held (delivered, unacknowledged) by other consumers.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from weir.cli.common import CliError, ReconnectNotice
from weir.errors import WeirError

if TYPE_CHECKING:
    from weir.cli.progress import Progress
    from weir.cli.read import Printer
    from weir.client.sync import Client

_POLL_S = 0.1


def read_subscription(
    client: Client,
    topic: str,
    subscription: str,
    *,
    type: str,
    initial_position: str,
    count: int | None,
    follow: bool,
    printer: Printer,
    bar: Progress,
    timeout: float,
    endpoint: str,
) -> int:
    """Returns how many messages were printed (each acknowledged before the next batch)."""
    consumer = client.subscribe(
        topic,
        subscription,
        type=type,
        initial_position=initial_position,
        receiver_queue_size=1000 if count is None else max(1, min(1000, count)),
        on_reconnect=ReconnectNotice(endpoint),
    )
    printed = 0
    try:
        consumer.wait_connected(timeout)
        quiet_since = time.monotonic()
        while count is None or printed < count:
            msgs = consumer.receive_batch(1000 if count is None else count - printed, _POLL_S)
            now = time.monotonic()
            if msgs:
                printer.print(cast(Any, msgs))
                printed += len(msgs)
                bar.update(completed=printed, messages=printed)
                try:
                    consumer.acknowledge(msgs)
                except WeirError as err:
                    raise CliError(
                        f"could not acknowledge on {endpoint} ({err.message}); the last "
                        f"{len(msgs)} message(s) printed may be delivered again"
                    ) from None
                quiet_since = now
                continue
            if not consumer.connected:
                if now - quiet_since >= timeout:
                    reason = consumer.last_error.message if consumer.last_error else "no connection"
                    raise CliError(
                        f"lost the connection to {endpoint} ({reason}); printed {printed} messages"
                    )
                continue
            if follow:
                continue
            info = client.describe_subscription(topic, subscription, timeout=timeout)
            if info.backlog <= info.unacked:  # nothing left, or only what others hold
                break
    finally:
        consumer.close()
    return printed
