"""Recent entries kept in memory, so tailing readers never go to the bookies.

Pulsar's EntryCache: the owner puts every entry it appends (and every entry it
reads from bookies); readers close behind the writer find them here. Bounded in
bytes; the oldest entries go first.
"""

from __future__ import annotations

from collections import OrderedDict

from weir.replication.managed_log.entry import LogEntry
from weir.replication.managed_log.metadata import Position


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Position, LogEntry] = OrderedDict()

    def get(self, position: Position) -> LogEntry | None:
        entry = self._entries.get(position)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def put(self, entry: LogEntry) -> None:
        if entry.size > self.max_bytes or entry.position in self._entries:
            return
        self._entries[entry.position] = entry
        self.nbytes += entry.size
        while self.nbytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.nbytes -= old.size

    def drop_ledger(self, ledger: int) -> None:
        """Forget a ledger's entries (it was trimmed, or closed short of what was cached)."""
        for pos in [p for p in self._entries if p.ledger == ledger]:
            self.nbytes -= self._entries.pop(pos).size

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0
