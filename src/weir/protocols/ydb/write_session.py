"""One YDB StreamWrite: init, then WriteRequests in, per-message acks out in send order.

Each WriteRequest becomes one weir batch (a few for requests over
`MAX_BATCH_DATA`): the messages' data are stored exactly as the SDK sent them,
compressed or not, and the batch header records their codec (``data_codec``),
so a reader gets the same bytes and codec back. Batches are queued on the
partition actor in arrival order, and the acks go out in that order as commits
become durable: the first ``skipped`` messages of a batch were duplicates (seq_no
at or below the producer's last), the rest are at consecutive offsets. Acks of
requests finished by the same commit share one WriteResponse.

The SDK checks every ack against its oldest unacked message, so acks are never
reordered or dropped; an error ends the session only after the acks of every
request before it went out.

A WriteRequest naming a transaction (``tx``: one of the Query service's, see
`weir.protocols.ydb.query_service`) writes into it; as in YDB its messages are
acknowledged ``written_in_tx`` (no offset), and readers of the YDB front see them
only once it commits.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
import zlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from weir.broker.access import Claim
from weir.broker.broker import Broker
from weir.broker.partition_actor import write_failed
from weir.broker.producers import WriterToken
from weir.broker.tenancy.limits import Lease
from weir.errors import (
    BadRequestError,
    MessageTooLargeError,
    ProducerFencedError,
    UnavailableError,
    WeirError,
)
from weir.protocols.ydb.auth import Authenticator
from weir.protocols.ydb.conversions import (
    check_metadata_keys,
    headers_from_metadata,
    session_meta_headers,
    storage_codec,
    ydb_codecs,
)
from weir.protocols.ydb.protos import StreamWrite, ydb_topic_pb2
from weir.protocols.ydb.query_service import txn_id_of
from weir.protocols.ydb.shutdown import Shutdown
from weir.protocols.ydb.status import SUCCESS, UnsupportedError, end_stream
from weir.protocols.ydb.topic_settings import persistent_only
from weir.security import BearerToken, Principal
from weir.security.authenticator import Credential
from weir.security.grants import Permission
from weir.storage.batch import parse_header
from weir.storage.batch_encoding import encode_batch
from weir.storage.codecs import Codec
from weir.storage.incoming import IncomingBatch
from weir.storage.partition import BatchResult

log = logging.getLogger("weir.ydb.write")

MAX_BATCH_DATA = 4 << 20  # data bytes per stored batch when a request is split
_ALREADY_WRITTEN = StreamWrite.WriteResponse.WriteAck.Skipped.REASON_ALREADY_WRITTEN
_session_ids = itertools.count(1)


@dataclass(slots=True)
class _Pending:
    """What the acker sends next: the acks of one request, a reply, the end, or an error."""

    future: asyncio.Future[list[BatchResult]] | None = None
    seq_nos: list[list[int]] | None = None  # per stored batch of the request
    in_txn: bool = False
    nbytes: int = 0
    reply: Any = None  # a ready FromServer (update_token_response)
    error: BaseException | None = None
    end: bool = False


class WriteSession:
    """One StreamWrite call; `run` returns (or aborts the call) when the session is over."""

    def __init__(
        self,
        broker: Broker,
        auth: Authenticator,
        shutdown: Shutdown,
        context: grpc.aio.ServicerContext,
        database: str,
    ) -> None:
        self.broker = broker
        self.auth = auth
        self.shutdown = shutdown
        self.context = context
        self.database = database
        self.session_id = f"weir-w{next(_session_ids)}-{uuid.uuid4().hex[:12]}"
        self.topic = ""
        self.partition = 0
        self.producer_id = ""
        self.key: bytes | None = None  # stored with each message when it adds information
        self.meta: dict[str, str] = {}  # the session's write_session_meta, as headers
        self._pending: deque[_Pending] = deque()
        self._have_pending = asyncio.Event()
        self._acked = asyncio.Event()
        self._inflight = 0
        self._failure: BaseException | None = None
        self._done = asyncio.Event()
        self.lease: Lease | None = None
        self._claim: Claim | None = None
        self.credential: Credential | None = auth.credential(context)
        self.principal: Principal | None = None
        self._access_ended: WeirError | None = None

    # ------------------------------------------------------------------ lifecycle

    async def run(self, requests: AsyncIterator[Any]) -> None:
        token: WriterToken | None = None
        tasks: list[asyncio.Task[Any]] = []
        try:
            self.principal = self.auth.principal(self.context)
            first = await anext(requests, None)
            if first is None:
                return
            if first.WhichOneof("client_message") != "init_request":
                raise BadRequestError("the first message of a write stream must be init_request")
            token = await self._init(first.init_request)
            reader = asyncio.create_task(self._read(requests))
            tasks = [
                reader,
                asyncio.create_task(self._ack()),
                asyncio.create_task(self._done.wait()),
                asyncio.create_task(self.shutdown.wait()),
            ]
            await asyncio.wait(tasks[2:], return_when=asyncio.FIRST_COMPLETED)
            if not self._done.is_set():
                # The server is stopping: take no more requests, ack what was taken, end.
                reader.cancel()
                self._push(_Pending(error=UnavailableError("server is shutting down")))
                await self._done.wait()
            if self._failure is not None:
                raise self._failure
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if isinstance(err, WeirError):
                log.debug("write session %s ends: %s", self.session_id, err)
            await end_stream(self.context, StreamWrite.FromServer, err)
        finally:
            for t in tasks:
                t.cancel()
            if token is not None:
                self.broker.unregister_writer(token)
            if self._claim is not None:
                self.broker.close_producer(self._claim)
            if self.lease is not None:
                self.lease.release()

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
        self._done.set()

    def end_access(self, err: WeirError) -> None:
        """The caller lost the right to write (see `Authenticator.watching`): from now on no
        request is taken, and the stream ends with ``err`` without waiting for acks."""
        self._access_ended = err
        self._failure = err
        self._done.set()

    def _superseded(self) -> None:
        self._fail(
            ProducerFencedError(f"another write session of producer {self.producer_id!r} took over")
        )

    async def _init(self, init: Any) -> WriterToken | None:
        self.auth.allow(Permission.PRODUCE, init.path, self.database, "write to")
        # no auto-creation here: a YDB client expects SCHEME_ERROR for a missing topic
        cfg = persistent_only(self.broker.topic(init.path, self.database), "write to")
        self.topic = cfg.name
        self.producer_id = init.producer_id
        self.message_limit = self.broker.message_limit(cfg.name)
        which = init.WhichOneof("partitioning")
        partition: int | None = None
        generation: int | None = None
        group = ""
        if which == "partition_id":
            partition = init.partition_id
        elif which == "partition_with_generation":
            partition = init.partition_with_generation.partition_id
            generation = init.partition_with_generation.generation
        elif which == "message_group_id":
            group = init.message_group_id
        if not self.producer_id and partition is None:
            # no producer to pin (and no dedup): spread by message group, else by session
            seed = group or self.session_id
            partition = zlib.crc32(seed.encode()) % cfg.partitions
        self.partition = await self.broker.resolve_partition(
            cfg.name, self.producer_id, partition, generation
        )
        if group and group != self.producer_id:
            self.key = group.encode()
        self.meta = session_meta_headers(init.write_session_meta)
        token = None
        last = None
        self.lease = self.broker.count_producer(cfg.name, self.producer_id)
        # a YDB producer is a Shared one: refused while an exclusive producer holds the
        # topic, fenced by an ExclusiveWithFencing one (see weir.broker.access)
        self._claim = await self.broker.open_producer(
            cfg.name, self.producer_id or f"\0session {self.session_id}", fence=self._fail
        )
        if self.producer_id:
            token = self.broker.register_writer(cfg.name, self.producer_id, self._superseded)
            last = self.broker.last_seq_no(cfg.name, self.partition, self.producer_id)
        await self.context.write(
            StreamWrite.FromServer(
                status=SUCCESS,
                init_response=StreamWrite.InitResponse(
                    last_seq_no=last or 0,
                    session_id=self.session_id,
                    partition_id=self.partition,
                    supported_codecs=ydb_topic_pb2.SupportedCodecs(codecs=ydb_codecs(cfg.codecs)),
                ),
            )
        )
        log.debug(
            "ydb write session %s opened: topic=%s partition=%d producer=%r last_seq_no=%s",
            self.session_id,
            cfg.name,
            self.partition,
            self.producer_id,
            last,
        )
        return token

    def _a_write_failed(self) -> bool:
        """Whether the partition actor failed a write of this session that the ack task has
        not seen yet (it hears of it turns later): the newest pending write tells
        (`write_failed`)."""
        newest = next((i.future for i in reversed(self._pending) if i.future is not None), None)
        return write_failed(newest)

    def _push(self, item: _Pending) -> None:
        self._pending.append(item)
        self._have_pending.set()

    # ------------------------------------------------------------------ requests in

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        try:
            async for req in requests:
                if self._access_ended is not None:
                    return
                kind = req.WhichOneof("client_message")
                if kind == "write_request":
                    await self._write(req.write_request)
                elif kind == "update_token_request":
                    self._update_token(req.update_token_request.token)
                else:
                    raise BadRequestError(f"unexpected {kind} on a write stream")
            self._push(_Pending(end=True))  # the client half-closed: ack what is pending
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._push(_Pending(error=err))

    def _update_token(self, token: str) -> None:
        if token:
            self.auth.verify(token)
        elif not self.auth.allow_anonymous:
            self.auth.verify(token)  # raises: anonymous calls are not allowed
        self.credential = BearerToken(token, "ticket") if token else None
        reply = StreamWrite.FromServer(
            status=SUCCESS, update_token_response=ydb_topic_pb2.UpdateTokenResponse()
        )
        self._push(_Pending(reply=reply))

    async def _write(self, wr: Any) -> None:
        msgs = wr.messages
        if not msgs:
            return
        txn_id = txn_id_of(wr.tx.id) if wr.HasField("tx") else 0
        if txn_id:
            self.broker.transaction(txn_id, wr.tx.session)  # a clear error before any work
        codec = storage_codec(wr.codec)
        data = [m.data for m in msgs]
        sizes = list(map(len, data))
        limit = self.message_limit
        biggest = max(sizes)
        if biggest > limit:
            raise MessageTooLargeError(
                f"a message of {biggest} bytes exceeds the limit of {limit} bytes "
                "(limits.max_message_bytes, or the topic's max_message_bytes policy)"
            )
        seq_nos = [m.seq_no for m in msgs]
        created = [m.created_at.seconds * 1000 + m.created_at.nanos // 1_000_000 for m in msgs]
        keys = self._keys(msgs)
        headers: list[dict[str, str]] | None = None
        if any(m.metadata_items for m in msgs):
            headers = [headers_from_metadata(m.metadata_items) for m in msgs]
            check_metadata_keys(headers)
            if self.meta:
                headers = [{**h, **self.meta} for h in headers]
        elif self.meta:
            headers = [self.meta] * len(msgs)
        total = sum(sizes)
        cuts = [0, len(msgs)] if total <= MAX_BATCH_DATA else _cuts(sizes, MAX_BATCH_DATA)
        batches: list[IncomingBatch] = []
        seq_groups: list[list[int]] = []
        nbytes = 0
        for a, b in itertools.pairwise(cuts):
            buf = encode_batch(
                data[a:b],
                producer_id=self.producer_id,
                seq_nos=seq_nos[a:b],
                created_at=created[a:b],
                keys=keys[a:b] if keys is not None else None,
                headers=headers[a:b] if headers is not None else None,
                codec=Codec.RAW,
                data_codec=codec,
            )
            batches.append(IncomingBatch(buf, parse_header(buf)))
            seq_groups.append(seq_nos[a:b])
            nbytes += len(buf)
        # Backpressure: stop reading the stream (gRPC flow control pushes back on the
        # client) while this session has too many bytes waiting for their commit.
        bound = self.broker.config.max_session_inflight_bytes
        while self._inflight and self._inflight + nbytes > bound:
            self._acked.clear()
            await self._acked.wait()
        if self._failure is not None or self._a_write_failed():
            return  # failed, fenced or superseded: nothing more of this session is stored
        if txn_id:
            fut = self.broker.submit_in_transaction(
                txn_id, self.topic, self.partition, batches, nbytes, wr.tx.session
            )
        else:
            fut = self.broker.submit(self.topic, self.partition, batches, nbytes)
        self._inflight += nbytes
        self._push(_Pending(future=fut, seq_nos=seq_groups, in_txn=bool(txn_id), nbytes=nbytes))

    def _keys(self, msgs: Any) -> list[bytes] | None:
        """Per-message keys: a message's own message_group_id, else the session's."""
        if not any(m.WhichOneof("partitioning") for m in msgs):
            return None if self.key is None else [self.key] * len(msgs)
        keys = []
        for m in msgs:
            which = m.WhichOneof("partitioning")
            if which == "message_group_id":
                keys.append(m.message_group_id.encode())
            elif which == "partition_id" and m.partition_id != self.partition:
                raise BadRequestError(
                    f"message for partition {m.partition_id} on a session writing to "
                    f"partition {self.partition}"
                )
            elif which == "partition_with_generation":
                raise UnsupportedError("per-message partition_with_generation is not supported")
            else:
                keys.append(self.key or b"")
        return keys

    # ------------------------------------------------------------------ acks out

    async def _ack(self) -> None:
        try:
            while True:
                while not self._pending:
                    self._have_pending.clear()
                    await self._have_pending.wait()
                head = self._pending[0]
                if head.future is not None and not head.future.done():
                    await asyncio.wait([head.future])
                resp = None
                while self._pending:
                    item = self._pending[0]
                    if item.future is not None:
                        if not item.future.done():
                            break
                        if item.future.exception() is not None and resp is not None:
                            break  # the acks before a failed write go out first
                        results = item.future.result()  # raises if the commit failed
                        if resp is None:
                            resp = StreamWrite.FromServer(status=SUCCESS)
                            resp.write_response.partition_id = self.partition
                        assert item.seq_nos is not None
                        _add_acks(resp.write_response.acks, results, item.seq_nos, item.in_txn)
                        self._inflight -= item.nbytes
                        self._pending.popleft()
                        continue
                    if resp is not None:
                        break  # send the acks before what comes next
                    self._pending.popleft()
                    if item.reply is not None:
                        await self.context.write(item.reply)
                    elif item.error is not None:
                        self._fail(item.error)
                        return
                    elif item.end:
                        self._done.set()
                        return
                if resp is not None:
                    await self.context.write(resp)
                    self._acked.set()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._fail(err)


def _add_acks(
    acks: Any, results: list[BatchResult], seq_groups: list[list[int]], in_txn: bool = False
) -> None:
    """One ack per message, in send order: skipped duplicates first, then written offsets
    (written in a transaction: no offset, as YDB answers)."""
    for r, seqs in zip(results, seq_groups, strict=True):
        skipped = r.skipped
        for s in seqs[:skipped]:
            a = acks.add()
            a.seq_no = s
            a.skipped.reason = _ALREADY_WRITTEN
        offset = r.offset - skipped
        for i in range(skipped, len(seqs)):
            a = acks.add()
            a.seq_no = seqs[i]
            if in_txn:
                a.written_in_tx.SetInParent()
            else:
                a.written.offset = offset + i


def _cuts(sizes: list[int], limit: int) -> list[int]:
    """Indexes cutting messages into runs of at most ``limit`` bytes (one message at least)."""
    cuts = [0]
    run = 0
    for i, n in enumerate(sizes):
        if run and run + n > limit:
            cuts.append(i)
            run = 0
        run += n
    cuts.append(len(sizes))
    return cuts
