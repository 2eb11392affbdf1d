"""The I/O-free rules of delivery a writer follows: its message size limit and how long
it has been stalled (messages waiting, no ack arriving), kept apart so they are tested alone."""

from __future__ import annotations

from weir.errors import MessageTooLargeError

DEFAULT_MAX_MESSAGE_BYTES = 32 << 20  # until the server reports its limit
DEFAULT_DELIVERY_TIMEOUT = 60.0


class MessageLimit:
    """The largest message (data plus key) a writer takes: its setting (None: follow the
    server), lowered to the server's limit once the server reports it at init."""

    def __init__(self, setting: int | None) -> None:
        self.setting = setting
        self.server: int | None = None
        self.bytes = setting or DEFAULT_MAX_MESSAGE_BYTES
        # above the default, a message waits for the server's answer before it is judged
        self.may_grow = setting is None

    def learn(self, server_limit: int) -> None:
        """The server's limit from a write session's init (0: a server that does not say)."""
        if server_limit > 0:
            self.server = server_limit
        limits = [x for x in (self.setting, self.server) if x]
        self.bytes = min(limits) if limits else DEFAULT_MAX_MESSAGE_BYTES
        self.may_grow = False

    def must_wait(self, size: int) -> bool:
        """Whether a message of ``size`` bytes needs the server's limit before it is judged."""
        return size > self.bytes and self.may_grow

    def check(self, size: int) -> None:
        if size > self.bytes:
            whose = "the server's limit" if self.bytes == self.server else "max_message_bytes"
            raise MessageTooLargeError(
                f"a message of {size} bytes exceeds {whose} of {self.bytes} bytes"
            )


class StallClock:
    """How long a writer has had messages waiting with no ack arriving.

    Fed, now and then, the counts of unacknowledged and acknowledged messages: an ack
    since the last look, or nothing waiting, starts the clock over.
    """

    def __init__(self) -> None:
        self._since: float | None = None
        self._acked = -1

    def observe(self, unacked: int, acked: int, now: float) -> float:
        """Seconds stalled as of ``now``."""
        if not unacked:
            self._since, self._acked = None, acked
            return 0.0
        if acked != self._acked or self._since is None:
            self._since, self._acked = now, acked
            return 0.0
        return now - self._since
