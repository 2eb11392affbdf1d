"""Failed logins: counted by reason, and slowed per user and per client address.

After `FREE_FAILURES` failures in a row for a user (`FREE_ADDRESS_FAILURES` from one
client address, which many users may share), further attempts are refused without checking the password for a lockout that doubles
with each failure, up to `MAX_LOCKOUT_S`; a success clears the record. Guessing
is then a few attempts a minute per user whatever the client does, while a
person who mistyped waits a second or two.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass

from weir.errors import UnauthorizedError

FREE_FAILURES = 5
FREE_ADDRESS_FAILURES = 30
MAX_LOCKOUT_S = 60.0
MAX_TRACKED = 10_000


@dataclass
class _Record:
    failures: int = 0
    locked_until: float = 0.0


class LoginThrottle:
    """Per-key failure records (keys: ``user:NAME``, ``addr:HOST``) and failure counters.

    Logins run in worker threads (the password check is slow on purpose): one lock
    guards the records and counters."""

    def __init__(self, clock: object = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self.failures: Counter[str] = Counter()  # reason -> count, for the metrics

    def _now(self) -> float:
        return self._clock()  # type: ignore[operator, no-any-return]

    def check(self, keys: list[str]) -> None:
        """Refuse (counted as "throttled") while any key is locked out."""
        now = self._now()
        with self._lock:
            for key in keys:
                rec = self._records.get(key)
                if rec is not None and rec.locked_until > now:
                    self.failures["throttled"] += 1
                    wait = math.ceil(rec.locked_until - now)
                    raise UnauthorizedError(f"too many failed logins: try again in {wait} s")

    def count(self, reason: str) -> None:
        """A refusal that is not a login (no credentials, a bad token): counted only."""
        with self._lock:
            self.failures[reason] += 1

    def failed(self, keys: list[str], reason: str) -> None:
        with self._lock:
            self._failed(keys, reason)

    def _failed(self, keys: list[str], reason: str) -> None:
        self.failures[reason] += 1
        now = self._now()
        if len(self._records) >= MAX_TRACKED:
            self._records = {k: r for k, r in self._records.items() if r.locked_until > now}
            if len(self._records) >= MAX_TRACKED:
                self._records.clear()
        for key in keys:
            rec = self._records.setdefault(key, _Record())
            rec.failures += 1
            free = FREE_ADDRESS_FAILURES if key.startswith("addr:") else FREE_FAILURES
            if rec.failures >= free:
                lockout = min(MAX_LOCKOUT_S, 2.0 ** (rec.failures - free))
                rec.locked_until = now + lockout

    def succeeded(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._records.pop(key, None)
