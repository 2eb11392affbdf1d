"""What a partition log needs of the tier: fetch an offloaded blob, checked, through
the tier's bounded cache (`TierReads`); `NO_TIER` when none is configured.

A blob whose local bytes were freed keeps its index entry with ``parts == 0``
(`is_remote`); its segment record (COPY_FINISHED) names the object. The
partition's one read path asks `TierReads` for such a blob the way it asks the
read cache for a local one, and gets the same `CachedBlob` (every batch's CRC
checked, batch starts indexed).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

from weir.errors import CorruptDataError
from weir.storage.blob import BlobInfo
from weir.storage.read_cache import CachedBlob
from weir.storage.tiered.payloads import PayloadRef
from weir.storage.tiered.remote_metadata import RemoteSegment


def is_remote(b: BlobInfo) -> bool:
    """Whether the blob's bytes are only in the object store (none left locally)."""
    return b.parts == 0 and not b.is_head


class TierReads(Protocol):
    """Offloaded blobs for the partition read path (implemented by the tier manager)."""

    def cached(self, owner: int, rec: RemoteSegment) -> CachedBlob | None:
        """The blob if the tier's cache holds it (no I/O)."""
        ...

    def fetch(self, owner: int, rec: RemoteSegment, label: str) -> CachedBlob:
        """The blob, from the cache or from its object (one request; blocks)."""
        ...

    def prefetch(self, owner: int, rec: RemoteSegment, label: str) -> Future[None]:
        """Bring the blob into the cache in the background (read-ahead, async readers)."""
        ...

    def load(self, rec: RemoteSegment, label: str) -> CachedBlob:
        """The blob from its object, checked, and not cached (a one-off scan; blocks)."""
        ...

    def discard(self, owner: int, rec: RemoteSegment) -> None:
        """Forget the blob in the cache (retention removed it)."""
        ...

    def payload(self, ref: PayloadRef, label: str, offset: int) -> bytes:
        """A large payload's bytes from its object, checked against its reference."""
        ...


class _NoTier:
    """The null tier: no object store configured, so no blob can be remote."""

    def _refuse(self, rec: RemoteSegment, label: str) -> CorruptDataError:
        return CorruptDataError(
            f"offsets were offloaded to object {rec.object_key} but no tier is configured "
            "([tier] backend)",
            partition=label,
            offset=rec.first_offset,
        )

    def cached(self, owner: int, rec: RemoteSegment) -> CachedBlob | None:
        return None

    def fetch(self, owner: int, rec: RemoteSegment, label: str) -> CachedBlob:
        raise self._refuse(rec, label)

    def prefetch(self, owner: int, rec: RemoteSegment, label: str) -> Future[None]:
        fut: Future[None] = Future()
        fut.set_exception(self._refuse(rec, label))
        return fut

    def load(self, rec: RemoteSegment, label: str) -> CachedBlob:
        raise self._refuse(rec, label)

    def discard(self, owner: int, rec: RemoteSegment) -> None:
        return None

    def payload(self, ref: PayloadRef, label: str, offset: int) -> bytes:
        raise CorruptDataError(
            f"a message's payload is in object {ref.key} but no tier is configured",
            partition=label,
            offset=offset,
        )


NO_TIER: TierReads = _NoTier()
