"""`EmbeddedOnly`: what the embedded `PartitionLog` has and a replicated log does not (yet).

Broker paths that reach into a partition's log for these (seek by time, byte
backlog quotas and the compaction trigger, DeleteRecords, transactions,
tiering and large-payload objects, compaction) get a `BadRequestError` that
says so, for that one request, instead of an AttributeError deep in the
broker. The size figures the metrics read are answered (a replicated log has
no tier: everything is "local").
"""

from __future__ import annotations

from typing import NoReturn

from weir.errors import BadRequestError


def refuse(what: str) -> NoReturn:
    raise BadRequestError(
        f"{what} is not supported on a replicated partition (storage.mode = "
        "'replicated') yet; see docs/cluster.md, 'Not done yet'"
    )


class EmbeddedOnly:
    """Mixed into `ReplicatedPartitionLog`: each member refuses with a clear error."""

    label: str

    @property
    def size_bytes(self) -> int:
        raise NotImplementedError  # provided by the log

    def offset_for_time(self, timestamp_ms: int) -> int:
        refuse("seeking by time (offsets for a timestamp, message TTL)")

    def bytes_from(self, offset: int, limit: int | None = None) -> int:
        refuse("a backlog quota by bytes (and the compaction threshold)")

    def offset_keeping(self, nbytes: int) -> int:
        refuse("a backlog quota by bytes")

    def prepare_trim(self, before: int) -> NoReturn:
        refuse("deleting records (DeleteRecords)")

    @property
    def txns(self) -> NoReturn:
        refuse("a transaction")

    @property
    def blobs(self) -> NoReturn:
        refuse("reading by blob (tiering, compaction, the YDB read path)")

    @property
    def remote(self) -> NoReturn:
        refuse("tiered storage")

    @property
    def log_id(self) -> NoReturn:
        refuse("tiered storage (large payloads, offload) and compaction")

    @property
    def head_bytes(self) -> int:
        return self.size_bytes

    @property
    def local_bytes(self) -> int:
        return self.size_bytes

    @property
    def remote_bytes(self) -> int:
        return 0
