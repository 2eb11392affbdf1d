"""`LedgerClient`: the entry point for creating, opening, recovering and deleting ledgers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from weir.errors import BadRequestError
from weir.replication.ledger.bookie_client import BookiePool
from weir.replication.ledger.handle import LedgerHandle, ReadHandle
from weir.replication.ledger.metadata import Fragment, LedgerMetadata, LedgerState, MetadataStore
from weir.replication.ledger.placement import BookieView, place_ensemble
from weir.replication.ledger.recovery_op import LedgerRecoveryOp
from weir.replication.ledger.rereplication_op import RereplicationOp
from weir.replication.registry import DEFAULT_ROOT, available_bookies
from weir.replication.tls import BookieTls


class LedgerClient:
    """Ledgers of the cluster under ``root`` in the ZooKeeper at ``zk_hosts`` (asyncio)."""

    def __init__(
        self,
        zk_hosts: str,
        *,
        root: str = DEFAULT_ROOT,
        zk_timeout: float = 10.0,
        request_timeout: float = 30.0,
        routes: dict[str, str] | None = None,
        tls: BookieTls | None = None,
    ) -> None:
        """``request_timeout``: seconds a bookie may take to answer one request before it
        counts as failed (the writer replaces it; recovery goes on without it).
        ``routes``: bookie id -> the address to connect to, where it differs (NAT, a proxy).
        ``tls``: mutual TLS to bookies that require it (`weir.replication.tls`)."""
        self.zk = KazooClient(
            hosts=zk_hosts,
            timeout=zk_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        )
        self.root = root
        self.store = MetadataStore(self.zk, root)
        self.pool = BookiePool(
            request_timeout, routes, tls.client_context() if tls is not None else None
        )
        self._started = False

    async def start(self, timeout: float = 30) -> LedgerClient:
        await asyncio.to_thread(self.zk.start, timeout)
        self._started = True
        return self

    async def __aenter__(self) -> LedgerClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.pool.close()
        if self._started:
            self._started = False
            await asyncio.to_thread(self.zk.stop)
            await asyncio.to_thread(self.zk.close)

    async def available_bookies(self) -> list[str]:
        return sorted(await asyncio.to_thread(available_bookies, self.zk, self.root))

    async def bookie_view(self) -> BookieView:
        """The registered bookies and their labels (racks), writable and read-only."""

        def read() -> BookieView:
            return BookieView(
                available_bookies(self.zk, self.root),
                available_bookies(self.zk, self.root, read_only=True),
            )

        return await asyncio.to_thread(read)

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        ensemble_change: bool = True,
        bookies: Sequence[str] | None = None,
    ) -> LedgerHandle:
        """A new OPEN ledger on ``ensemble_size`` distinct available bookies, and its writer.

        ``ensemble_change``: replace a bookie that fails during writes (BookKeeper's
        default); off, the writer goes on while each entry still gets AQ acks.
        ``bookies``: the ensemble, in order, instead of available ones spread over racks
        (`placement.py`)."""
        if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
            raise BadRequestError(
                f"quorums must be E >= WQ >= AQ >= 1, got E={ensemble_size} "
                f"WQ={write_quorum} AQ={ack_quorum}"
            )
        if bookies is not None:
            ensemble = tuple(bookies)  # checked by LedgerMetadata: E distinct bookies
        else:
            labelled = await asyncio.to_thread(available_bookies, self.zk, self.root)
            ensemble = place_ensemble(labelled, ensemble_size)
        md = LedgerMetadata(
            ensemble_size, write_quorum, ack_quorum, ensembles=(Fragment(0, ensemble),)
        )
        ledger_id, version = await self.store.create(md)
        return LedgerHandle(
            ledger_id,
            md,
            version,
            self.pool,
            self.store,
            self.bookie_view if ensemble_change else None,
        )

    async def open_ledger(self, ledger_id: int, *, recover: bool = False) -> ReadHandle:
        """Open for reading. ``recover=True`` fences and closes an open ledger first (the
        writer is fenced out); without it an open ledger reads up to the LAC it learns."""
        if recover:
            md, _ = await LedgerRecoveryOp(ledger_id, self.pool, self.store).run()
        else:
            md, _ = await self.store.read(ledger_id)
        handle = ReadHandle(ledger_id, md, self.pool, self.store)
        if not handle.closed:
            await handle.read_lac()
        return handle

    async def recover(self, ledger_id: int) -> LedgerMetadata:
        """Recover and close a ledger; its closed metadata (a no-op on a closed one)."""
        md, _ = await LedgerRecoveryOp(ledger_id, self.pool, self.store).run()
        return md

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the metadata (bookies' garbage collection of the entries comes later)."""
        md, _ = await self.store.read(ledger_id)
        if md.state != LedgerState.CLOSED:
            raise BadRequestError(
                f"ledger {ledger_id} is {md.state.value}: close or recover it before deleting"
            )
        await self.store.delete(ledger_id)

    async def rereplicate(self, ledger_id: int, lost_bookie: str) -> LedgerMetadata:
        """Copy a closed ledger's entries held by ``lost_bookie`` to other bookies and
        record them in the metadata: every entry has WQ copies again."""
        op = RereplicationOp(ledger_id, lost_bookie, self.pool, self.store, self.bookie_view)
        return await op.run()

    async def list_ledgers(self) -> list[int]:
        return await self.store.list()
