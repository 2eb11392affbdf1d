"""A history of operations, recorded compactly, for the checker in `checker.py` (Jepsen style).

Producers record every message they attempted and every ack they got; consumers record
every message delivered (with the reader session that delivered it) and every commit
the server acknowledged; consumers of durable subscriptions record every delivery (with
the server's lifetime and the redelivery count) and every acknowledgement the server
answered; after each restart the committed positions the server reports are recorded
as observations; at the end the whole topic is read back into `Contents`.

Messages carry a unique id in their data (``id:<producer>:<n>``, ``n`` the producer's
write order, dense from 0), so every observation ties back to one attempt. Partitions
are keyed ``topic_index * 1000 + partition``.

A soak records tens of millions of observations, so nothing is kept per message as a
Python object: a producer's messages are arrays indexed by ``n`` (state flags, the
first ack, the first place the message was seen at), each partition has an array
indexed by offset (the message seen there first), and only what disagrees with those
(a second place, a second message at one offset, an ack that differs from the first)
goes to small dictionaries. What the rules need is kept exactly; see `checker.py`.
"""

from __future__ import annotations

import threading
from array import array
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from tests.reliability.checker import Report as Report
    from tests.reliability.checker import check as check


def __getattr__(name: str) -> Any:
    """`check` and `Report` live in `checker.py` now; tests written before the split
    import them from here, so they still can (imported lazily: checker imports this)."""
    if name in ("check", "Report"):
        from tests.reliability import checker

        return getattr(checker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TOPIC_STRIDE = 1000  # partition key = topic index * TOPIC_STRIDE + partition

NONE = -1  # an empty slot of the arrays below
N_BITS = 40  # a message reference is producer << N_BITS | n
N_MASK = (1 << N_BITS) - 1
SPARSE_AFTER = 1 << 22  # an n or offset this far past the array's end is kept in a dict

# flags per message
ATTEMPTED = 1
ACKED = 2
DELIVERED = 4  # by a reader session or a subscription
PLACED = 8  # place_key / place_off hold the first (partition, offset) it was seen at


def message_id(data: bytes) -> str:
    head = data.split(b"|", 1)[0]
    return head.decode(errors="replace")


def make_data(producer: str, n: int, size: int) -> bytes:
    head = f"id:{producer}:{n}|".encode()
    return head + b"." * max(0, size - len(head))


def parse_id(mid: str) -> tuple[str, int] | None:
    """(producer, n) of a well-formed id, else None."""
    parts = mid.split(":")
    if len(parts) != 3 or parts[0] != "id" or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


class Stored(NamedTuple):
    """One message of the final contents of a partition."""

    offset: int
    mid: str
    producer_id: str = ""  # as the server stored it ("" when it had none)
    seq_no: int = 0


class Ack(NamedTuple):
    key: int  # partition key
    offset: int | None  # None: skipped as a duplicate by the broker (offset unknown)


class CommitAck(NamedTuple):
    clock: int  # history clock when the ack arrived
    consumer: str
    key: int
    offset: int


class CommitSeen(NamedTuple):
    clock: int  # history clock before the server was asked
    consumer: str
    key: int
    offset: int
    when: str  # "restart 12", "final"...


def _grow(a: array, n: int, fill: int) -> None:  # type: ignore[type-arg]
    """Make index ``n`` of ``a`` exist (by a quarter more each time: appends stay cheap)."""
    k = max(n + 1, len(a) + len(a) // 4 + 16) - len(a)
    a.extend(array(a.typecode, [fill]) * k)


class Producer:
    """One producer's messages as arrays indexed by n (see the module docstring)."""

    __slots__ = (
        "ack_key",
        "ack_keys",
        "ack_off",
        "flags",
        "label",
        "place_key",
        "place_off",
        "raw",
    )

    def __init__(self, label: str, raw: bool = False) -> None:
        self.label = label
        self.raw = raw  # an id that is not ``id:<producer>:<n>``: the label is the whole id
        self.flags = bytearray()
        self.ack_key = array("i")  # the first ack's partition key
        self.ack_off = array("q")  # the first ack's offset (NONE: skipped, offset unknown)
        self.place_key = array("i")
        self.place_off = array("q")
        self.ack_keys: set[int] = set()  # every partition an ack named (the pin rule)

    def grow(self, n: int) -> None:
        if n >= len(self.flags):
            k = max(n + 1, len(self.flags) + len(self.flags) // 4 + 16) - len(self.flags)
            self.flags.extend(bytes(k))
            for a, fill in (
                (self.ack_key, NONE),
                (self.ack_off, NONE),
                (self.place_key, NONE),
                (self.place_off, NONE),
            ):
                _grow(a, len(self.flags) - 1, fill)

    def name(self, n: int) -> str:
        return self.label if self.raw else f"id:{self.label}:{n}"


class SubDeliveries:
    """A subscription's deliveries and answered acks, as parallel arrays."""

    def __init__(self) -> None:
        # deliveries: partition key, offset, server lifetime, redelivery count, the clock at
        # which the consuming client was opened (everything it gets is sent after that)
        self.d_key = array("i")
        self.d_off = array("q")
        self.d_gen = array("q")
        self.d_count = array("i")
        self.d_opened = array("q")
        # answered individual acks: partition key, offset, server lifetime, clock
        self.a_key = array("i")
        self.a_off = array("q")
        self.a_gen = array("q")
        self.a_clock = array("q")
        # answered cumulative acks: (key, offset up to and including, lifetime, clock)
        self.cumulative: list[tuple[int, int, int, int]] = []


class History:
    """Thread-safe, compact log of what clients attempted and observed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = 0
        self.producers: list[Producer] = []
        self._pids: dict[str, int] = {}
        self._raw: dict[str, int] = {}
        # (key, offset) -> the first message seen there, per partition key
        self.holder: dict[int, array] = {}  # type: ignore[type-arg]
        self.far_holder: dict[tuple[int, int], int] = {}  # offsets far past the array
        self.extra_holders: dict[tuple[int, int], set[int]] = defaultdict(set)
        self.extra_places: dict[int, set[tuple[int, int]]] = defaultdict(set)
        self.more_acks: dict[int, list[Ack]] = defaultdict(list)  # acks unlike the first
        self.maybe_phantoms: set[int] = set()  # delivered before (or without) an attempt
        self.attempted_count = 0
        self.acked_count = 0
        self.delivered_count = 0
        self._last_read: dict[tuple[str, int], int] = {}
        self.backwards_reads: list[str] = []
        self.subs: dict[str, SubDeliveries] = {}
        self.commit_acks: list[CommitAck] = []
        self.commit_seen: list[CommitSeen] = []
        self.faults: list[str] = []
        self.errors: list[str] = []  # client errors the load did not expect

    # ------------------------------------------------------------------ ids

    def _ref_locked(self, mid: str) -> tuple[Producer, int, int]:
        """(producer, n, reference) of a message id, made known if new."""
        pn = parse_id(mid)
        if pn is not None:
            pid = self._pids.get(pn[0])
            if pid is None:
                pid = self._pids[pn[0]] = len(self.producers)
                self.producers.append(Producer(pn[0]))
            prod = self.producers[pid]
            n = pn[1]
            if n < len(prod.flags) + SPARSE_AFTER and n <= N_MASK:
                prod.grow(n)
                return prod, n, pid << N_BITS | n
        pid = self._raw.get(mid)
        if pid is None:
            pid = self._raw[mid] = len(self.producers)
            self.producers.append(Producer(mid, raw=True))
        prod = self.producers[pid]
        prod.grow(0)
        return prod, 0, pid << N_BITS

    def ref(self, mid: str) -> int:
        """The integer reference of a message id (see `name`)."""
        with self._lock:
            return self._ref_locked(mid)[2]

    def name(self, ref: int) -> str:
        return self.producers[ref >> N_BITS].name(ref & N_MASK)

    def producer_of(self, ref: int) -> Producer:
        return self.producers[ref >> N_BITS]

    # ------------------------------------------------------------------ places

    def held_at(self, key: int, offset: int) -> int:
        """The first message seen at (key, offset) by an ack or a delivery (NONE: none)."""
        a = self.holder.get(key)
        if a is not None and offset < len(a):
            return int(a[offset])
        return self.far_holder.get((key, offset), NONE)

    def _claim(self, prod: Producer, n: int, ref: int, key: int, offset: int) -> None:
        """Message ``ref`` was seen at (key, offset)."""
        if prod.flags[n] & PLACED:
            if prod.place_key[n] != key or prod.place_off[n] != offset:
                self.extra_places[ref].add((key, offset))
        else:
            prod.flags[n] |= PLACED
            prod.place_key[n] = key
            prod.place_off[n] = offset
        a = self.holder.get(key)
        if a is None:
            a = self.holder[key] = array("q")
        if offset >= len(a):
            if offset < 0 or offset >= len(a) + SPARSE_AFTER:
                first = self.far_holder.setdefault((key, offset), ref)
                if first != ref:
                    self.extra_holders[(key, offset)].add(ref)
                return
            _grow(a, offset, NONE)
        first = a[offset]
        if first == NONE:
            a[offset] = ref
        elif first != ref:
            self.extra_holders[(key, offset)].add(ref)

    # ------------------------------------------------------------------ recording

    def clock(self) -> int:
        """A point in the history: events recorded later get a higher clock."""
        with self._lock:
            self._clock += 1
            return self._clock

    def attempted(self, mid: str) -> None:
        with self._lock:
            prod, n, _ = self._ref_locked(mid)
            if not prod.flags[n] & ATTEMPTED:
                prod.flags[n] |= ATTEMPTED
                self.attempted_count += 1

    def acked(self, mid: str, key: int, offset: int | None) -> None:
        with self._lock:
            prod, n, ref = self._ref_locked(mid)
            off = NONE if offset is None else offset
            if not prod.flags[n] & ACKED:
                prod.flags[n] |= ACKED
                prod.ack_key[n] = key
                prod.ack_off[n] = off
                self.acked_count += 1
            elif prod.ack_key[n] != key or prod.ack_off[n] != off:
                self.more_acks[ref].append(Ack(key, offset))
            prod.ack_keys.add(key)
            if offset is not None:
                self._claim(prod, n, ref, key, offset)

    def _delivered_locked(self, key: int, offset: int, mid: str) -> None:
        prod, n, ref = self._ref_locked(mid)
        if not prod.flags[n] & ATTEMPTED:
            self.maybe_phantoms.add(ref)
        prod.flags[n] |= DELIVERED
        self._claim(prod, n, ref, key, offset)

    def delivered(self, session: str, key: int, offset: int, mid: str) -> None:
        """A reader session delivered ``mid`` at (key, offset)."""
        self.delivered_batch(session, key, (offset,), (mid,))

    def delivered_batch(
        self, session: str, key: int, offsets: Iterable[int], mids: Iterable[str]
    ) -> None:
        """A reader session delivered these messages of partition ``key``, in this order.
        One session never goes back in a partition: checked here, in delivery order."""
        with self._lock:
            last = self._last_read.get((session, key))
            for offset, mid in zip(offsets, mids, strict=True):
                self.delivered_count += 1
                self._delivered_locked(key, offset, mid)
                if last is not None and offset <= last:
                    self.backwards_reads.append(f"session {session} k{key}: {offset} after {last}")
                last = offset
            if last is not None:
                self._last_read[(session, key)] = last

    def commit_acked(self, consumer: str, key: int, offset: int) -> None:
        """The server acknowledged a commit of ``offset`` (commit_with_ack returned)."""
        with self._lock:
            self._clock += 1
            self.commit_acks.append(CommitAck(self._clock, consumer, key, offset))

    def commit_observed(self, since: int, consumer: str, key: int, offset: int, when: str) -> None:
        """The server reported ``offset`` as committed, asked after clock ``since``."""
        with self._lock:
            self.commit_seen.append(CommitSeen(since, consumer, key, offset, when))

    # ------------------------------------------------------------------ subscriptions

    def _sub(self, sub: str) -> SubDeliveries:
        s = self.subs.get(sub)
        if s is None:
            s = self.subs[sub] = SubDeliveries()
        return s

    def sub_delivered(
        self,
        sub: str,
        key: int,
        offset: int,
        mid: str,
        *,
        generation: int,
        redelivery_count: int,
        opened: int,
    ) -> None:
        """Subscription ``sub`` delivered ``mid`` at (key, offset), from the server lifetime
        ``generation`` with ``redelivery_count``, to a client opened at clock ``opened``
        (`clock()` taken before the client was made: all it receives was sent after)."""
        with self._lock:
            self._delivered_locked(key, offset, mid)
            s = self._sub(sub)
            s.d_key.append(key)
            s.d_off.append(offset)
            s.d_gen.append(generation)
            s.d_count.append(redelivery_count)
            s.d_opened.append(opened)

    def sub_acked(self, sub: str, refs: Iterable[tuple[int, int]], *, generation: int) -> None:
        """The server answered an individual ack of (key, offset)s: they are durable.
        ``generation``: the server lifetime that answered."""
        with self._lock:
            self._clock += 1
            s = self._sub(sub)
            for key, offset in refs:
                s.a_key.append(key)
                s.a_off.append(offset)
                s.a_gen.append(generation)
                s.a_clock.append(self._clock)

    def sub_acked_cumulative(self, sub: str, key: int, offset: int, *, generation: int) -> None:
        """The server answered a cumulative ack: every offset of ``key`` up to ``offset``."""
        with self._lock:
            self._clock += 1
            self._sub(sub).cumulative.append((key, offset, generation, self._clock))

    # ------------------------------------------------------------------ the rest

    def fault(self, what: str) -> None:
        with self._lock:
            self.faults.append(what)

    def error(self, what: str) -> None:
        with self._lock:
            self.errors.append(what)


class Contents:
    """The final contents of the partitions read back, as arrays per partition key."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.offsets: dict[int, array] = {}  # type: ignore[type-arg]
        self.refs: dict[int, array] = {}  # type: ignore[type-arg]
        self.spids: dict[int, array] = {}  # type: ignore[type-arg]  # server producer id (index)
        self.seqs: dict[int, array] = {}  # type: ignore[type-arg]
        self.producer_ids: list[str] = []
        self._spid: dict[str, int] = {}

    def partition(self, key: int) -> None:
        """Make ``key`` known (an empty partition is still one)."""
        if key not in self.offsets:
            self.offsets[key] = array("q")
            self.refs[key] = array("q")
            self.spids[key] = array("i")
            self.seqs[key] = array("q")

    def add(self, key: int, offset: int, mid: str, producer_id: str = "", seq_no: int = 0) -> None:
        """The next message of partition ``key`` (in offset order)."""
        self.partition(key)
        sp = self._spid.get(producer_id)
        if sp is None:
            sp = self._spid[producer_id] = len(self.producer_ids)
            self.producer_ids.append(producer_id)
        self.offsets[key].append(offset)
        self.refs[key].append(self.history.ref(mid))
        self.spids[key].append(sp)
        self.seqs[key].append(seq_no)

    def __len__(self) -> int:
        return sum(len(a) for a in self.offsets.values())

    @classmethod
    def of(
        cls,
        history: History,
        stored: dict[int, list[Stored]] | dict[int, list[tuple[int, str]]],
    ) -> Contents:
        """From rows (``Stored`` or (offset, id) tuples) per partition key."""
        c = cls(history)
        for key, rows in stored.items():
            c.partition(key)
            for row in rows:
                r = row if isinstance(row, Stored) else Stored(*row)
                c.add(key, r.offset, r.mid, r.producer_id, r.seq_no)
        return c
