"""The write-ahead journal: sequential records, one ``fdatasync`` per append.

BookKeeper's journal in front of its ledger storage (issue 26): a commit is durable once
its record is in the journal, so the acknowledgement waits for one sequential write and
one ``fdatasync`` instead of LMDB's two durable writes. `JournaledKV` applies records to
LMDB later and deletes the segments LMDB holds.

On disk: a directory of segment files named by the sequence number of their first
record (``00000000000000000042.wj``). A record is ``length u32 | crc32c u32 | seq u64``
then ``length`` bytes of payload; the CRC covers the sequence number and the payload.
A segment never follows a torn or failed record: after a failed write the next record
opens a new segment, and a segment that starts at ``S`` supersedes records ``>= S`` of
the segments before it (a record whose fsync failed may or may not be on disk; it was
never acknowledged, and its sequence number is reused by the record that replaces it).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from weir.errors import CommitFailedError, CorruptDataError, StorageFullError
from weir.storage.batch import crc32c

log = logging.getLogger("weir.storage.journal")

_HEAD = struct.Struct(">IIQ")  # payload length, crc32c(seq + payload), seq
_SEQ = struct.Struct(">Q")
SUFFIX = ".wj"
DEFAULT_SEGMENT_BYTES = 64 << 20
MAX_RECORD_BYTES = 1 << 31


def _segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{SUFFIX}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    payload: memoryview


def _valid_at(data: memoryview, pos: int) -> int | None:
    """The sequence number of a whole, intact record at ``pos``, else None."""
    if pos < 0 or pos + _HEAD.size > len(data):
        return None
    length, crc, seq = _HEAD.unpack_from(data, pos)
    body = pos + _HEAD.size
    if length > MAX_RECORD_BYTES or body + length > len(data):
        return None
    if crc32c(data[body : body + length], crc32c(data[pos + 8 : body])) != crc:
        return None
    return int(seq)


_LOOKAHEAD = 8  # records after a bad one searched for (damage that spans several)


def _records(data: memoryview, first: int, path: Path) -> Iterator[Record]:
    """The valid records at the start of a segment's bytes; stops at a torn tail.

    Each append is synced before the next starts, so only the last record of a segment
    can be torn: a bad record followed by an intact later one is damage to acknowledged
    records, raised (a crash mid-append leaves nothing valid after the torn record).
    """
    pos = 0
    end = len(data)
    prev = first - 1
    while pos < end:
        seq = _valid_at(data, pos)
        if seq is None:
            raw = data.obj if isinstance(data.obj, bytes) else bytes(data)
            for later in range(prev + 2, prev + 2 + _LOOKAHEAD):
                pat = _SEQ.pack(later)
                hit = raw.find(pat, pos + 1)
                while hit != -1:
                    if _valid_at(data, hit - 8) == later:
                        raise CorruptDataError(
                            f"journal {path}: damaged record at byte {pos}, and record "
                            f"{later} after it is intact: acknowledged writes are damaged"
                        )
                    hit = raw.find(pat, hit + 1)
            return
        length = _HEAD.unpack_from(data, pos)[0]
        body = pos + _HEAD.size
        yield Record(seq, data[body : body + length])
        prev = seq
        pos = body + length


def read_segments(directory: Path) -> list[tuple[int, Path]]:
    """The segments of ``directory``, (first seq, path), oldest first."""
    out = []
    for p in directory.glob(f"*{SUFFIX}"):
        try:
            out.append((int(p.name[: -len(SUFFIX)]), p))
        except ValueError:
            continue
    return sorted(out)


def replay(directory: Path, after: int) -> Iterator[Record]:
    """Every journaled record with a sequence number above ``after``, in order, each once.

    Within a segment records are consecutive; a torn tail (a crash mid-append) ends
    the segment. A later segment supersedes the records of earlier ones from its first
    sequence number on. A gap in the sequence is damage, not a torn tail: raised.
    """
    segments = read_segments(directory)
    expect = after + 1
    for i, (first, path) in enumerate(segments):
        limit = segments[i + 1][0] if i + 1 < len(segments) else None
        if first > expect:
            # the segment starts past what we have: its predecessor lost records
            raise CorruptDataError(
                f"journal {path} starts at {first} but records end at {expect - 1}"
            )
        data = memoryview(path.read_bytes())
        for rec in _records(data, first, path):
            if limit is not None and rec.seq >= limit:
                break
            if rec.seq < expect:
                continue
            if rec.seq != expect:
                raise CorruptDataError(
                    f"journal {path}: record {rec.seq} follows {expect - 1}; "
                    "acknowledged writes may be missing"
                )
            yield rec
            expect += 1


class Journal:
    """Appends records to the newest segment of ``directory``, each durable on return.

    Not thread-safe: one writer (the KV's commit) at a time. ``start_seq`` is the
    sequence number of the next record; a fresh segment is opened at start.
    """

    def __init__(
        self,
        directory: Path,
        start_seq: int,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        sync: bool = True,
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        if sync:
            # the directory's own name: durable before any record in it counts (it may
            # be new, or left unsynced by a run that crashed just after creating it)
            _fsync_dir(self.directory.parent)
        self.next_seq = start_seq
        self._segment_bytes = segment_bytes
        self._sync = sync
        self._fd: int | None = None
        self._size = 0
        self._unsuperseded = False  # a failed record without a segment superseding it
        # first seq of every segment still on disk, oldest first (the open one last)
        self.segments: list[int] = [first for first, _ in read_segments(directory)]

    def _roll(self) -> None:
        """Close the current segment (if any) and open a new one at ``next_seq``."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        path = self.directory / _segment_name(self.next_seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            if self._sync:
                _fsync_dir(self.directory)  # the new file's name is durable too
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._size = 0
        self._unsuperseded = False  # this segment starts at the failed record, if any
        if self.segments and self.segments[-1] == self.next_seq:
            return  # a failed segment replaced by one starting at the same record
        self.segments.append(self.next_seq)

    def append(self, payload: bytes | memoryview) -> int:
        """Write one record and fdatasync it; its sequence number once durable.

        On any failure the record is not acknowledged and the next append starts a new
        segment at the same sequence number (never writing after a failed fsync).
        """
        seq = self.next_seq
        if len(payload) > MAX_RECORD_BYTES:  # replay would take it for a torn length
            raise CommitFailedError(
                f"journal record of {len(payload)} bytes is too large (at most {MAX_RECORD_BYTES})"
            )
        try:
            if self._fd is None or self._size >= self._segment_bytes:
                self._roll()
            assert self._fd is not None
            seqb = _SEQ.pack(seq)
            head = _HEAD.pack(len(payload), crc32c(payload, crc32c(seqb)), seq)
            size = len(head) + len(payload)
            n = os.writev(self._fd, (head, payload))  # no copy of the payload
            if n < size:  # a short write (rare on a file): the rest, then the flush
                rest = memoryview(head + payload)[n:]
                while rest:
                    rest = rest[os.write(self._fd, rest) :]
            if self._sync:
                os.fdatasync(self._fd)
        except OSError as exc:
            self._discard()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFullError(f"disk full writing the journal: {exc}") from None
            raise CommitFailedError(f"journal write failed: {exc}") from None
        self._size += size
        self.next_seq = seq + 1
        return seq

    def _discard(self) -> None:
        """After a failed append: the record must never count. It may be whole in the page
        cache (a process restart would replay it) or on disk, so it is cut off the file
        (the page cache's view at once) and a new segment at the same sequence number is
        opened now, durably, superseding it on disk; each best effort on a failing disk.
        Until a superseding segment exists, `supersede` must succeed before anything may
        be made durable outside the journal (a direct LMDB commit)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
        self._abandon()
        self._unsuperseded = True
        with contextlib.suppress(OSError):
            self.supersede()

    def supersede(self) -> None:
        """Open the segment that supersedes a failed record, if one is still needed
        (raises OSError when the disk still fails)."""
        if self._unsuperseded:
            self._roll()

    def _abandon(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def delete_applied(self, applied: int) -> int:
        """Delete the segments whose every record is at or below ``applied`` (LMDB holds
        them durably); the open segment stays. How many were deleted."""
        gone = 0
        while len(self.segments) > 1 and self.segments[1] <= applied + 1:
            first = self.segments.pop(0)
            with contextlib.suppress(FileNotFoundError):
                (self.directory / _segment_name(first)).unlink()
            gone += 1
        return gone

    def delete_all(self) -> None:
        """Remove every segment (all applied, e.g. after replay or at a clean close)."""
        self._abandon()
        for _, path in read_segments(self.directory):
            path.unlink()
        self.segments = []
        if self._sync:
            _fsync_dir(self.directory)

    def close(self) -> None:
        self._abandon()
