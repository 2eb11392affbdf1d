"""Producer, Send, CloseProducer: a connection's producers (`producers.PulsarProducer`)."""

from __future__ import annotations

import itertools

from weir.access_mode import AccessMode
from weir.errors import (
    BadRequestError,
    ProducerBusyError,
    ProducerFencedError,
    TopicTerminatedError,
)
from weir.protocols.pulsar import names
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.codec import Frame
from weir.protocols.pulsar.connection_state import ConnectionState
from weir.protocols.pulsar.producers import PulsarProducer
from weir.security.grants import Permission

T = pb.BaseCommand
_names = itertools.count(1)


class ProducerCommands(ConnectionState):
    """Producer, Send, CloseProducer: a connection's producers (`producers.PulsarProducer`)."""

    async def handle_producer(self, req: pb.CommandProducer) -> None:
        if req.producer_id in self.producers:
            raise BadRequestError(f"producer id {req.producer_id} is in use on this connection")
        if req.encrypted:
            raise names.NotServedError("encrypted producers are not served by weir")
        t = self._topic_name(req.topic)
        checks: list[tuple[object, str, str]] = []
        self._allow(Permission.PRODUCE, t, "write to", checks)
        cfg = await self._topic_for_use(t)
        if cfg.terminated:
            raise TopicTerminatedError(f"topic {t.url()} is terminated: it takes no more messages")
        partition, id_partition = self._partition(t, cfg)
        schema_version = await self._schema_version(
            cfg, req.schema if req.HasField("schema") else None
        )
        name = req.producer_name or f"weir-{self.broker.generation}-{next(_names)}"
        key = (cfg.name, partition, name)
        old = self.state.producers.get(key)
        if old is not None and not old.closed:
            if req.epoch == 0 and req.user_provided_producer_name:
                raise ProducerBusyError(
                    f"producer {name!r} is already connected to {t.url(t.partition)}"
                )
            old.release()  # the same producer reconnecting: its old session goes
        mode = AccessMode(int(req.producer_access_mode))
        p = PulsarProducer(
            req.producer_id,
            name,
            cfg.name,
            partition,
            id_partition,
            self.broker,
            self.send,
            self.broker.message_limit(cfg.name),
            schema_version=schema_version,
            checks=checks,
        )
        self.producers[req.producer_id] = p
        try:
            p.lease = self.broker.count_producer(cfg.name, name)
            if mode is AccessMode.WAIT_FOR_EXCLUSIVE:
                self.send(
                    T(
                        type=T.PRODUCER_SUCCESS,
                        producer_success=pb.CommandProducerSuccess(
                            request_id=req.request_id, producer_name=name, producer_ready=False
                        ),
                    )
                )

            def fenced(err: ProducerFencedError) -> None:
                self._producer_closed_by_server(p)

            p.claim = await self.broker.open_producer(
                cfg.name,
                name,
                mode,
                req.topic_epoch if req.HasField("topic_epoch") else None,
                fenced,
            )
            p.token = self.broker.register_writer(
                cfg.name, f"{name}\0{partition}", lambda: self._producer_closed_by_server(p)
            )
        except BaseException:
            p.release()
            self.producers.pop(req.producer_id, None)
            raise
        self.state.producers[key] = p

        def forget(q: PulsarProducer) -> None:
            if self.state.producers.get(key) is q:
                del self.state.producers[key]

        p.on_closed = forget
        last = None
        if self.broker.policies_of(cfg.name)["deduplication"]:
            last = self.broker.last_seq_no(cfg.name, partition, name)
        success = pb.CommandProducerSuccess(
            request_id=req.request_id,
            producer_name=name,
            last_sequence_id=-1 if last is None else last,
            producer_ready=True,
        )
        if mode.exclusive:
            success.topic_epoch = p.claim.epoch
        if schema_version is not None:
            success.schema_version = schema_version.to_bytes(8, "big")
        p.start()
        self.send(T(type=T.PRODUCER_SUCCESS, producer_success=success))

    def _producer_closed_by_server(self, p: PulsarProducer) -> None:
        """Fenced or superseded: the client hears CloseProducer (and reconnects, or gives up
        when it is fenced)."""
        if self.producers.get(p.producer_id) is not p:
            return
        del self.producers[p.producer_id]
        p.release()
        self.send(
            T(
                type=T.CLOSE_PRODUCER,
                close_producer=pb.CommandCloseProducer(producer_id=p.producer_id, request_id=0),
            )
        )

    def handle_send(self, send: pb.CommandSend, frame: Frame) -> None:
        p = self.producers.get(send.producer_id)
        if p is None or frame.metadata is None or frame.payload is None:
            self.send(
                T(
                    type=T.SEND_ERROR,
                    send_error=pb.CommandSendError(
                        producer_id=send.producer_id,
                        sequence_id=send.sequence_id,
                        error=pb.UnknownError,
                        message="no such producer on this connection"
                        if p is None
                        else "Send without a message",
                    ),
                )
            )
            return
        p.handle_send(send, frame.metadata, frame.payload)

    async def handle_close_producer(self, req: pb.CommandCloseProducer) -> None:
        p = self.producers.pop(req.producer_id, None)
        if p is not None:
            await p.drain()
            await p.stop()
        self.success(req.request_id)
