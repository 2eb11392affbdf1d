"""LookupTopic, PartitionedTopicMetadata, GetTopicsOfNamespace: where a topic is served and
how many partitions it has.
"""

from __future__ import annotations

import contextlib
import re

from weir.broker.topics import NON_PERSISTENT, TopicConfig
from weir.errors import (
    NotOwnerError,
    WeirError,
)
from weir.protocols.pulsar import pulsar_api_pb2 as pb
from weir.protocols.pulsar.connection_state import ConnectionState
from weir.protocols.pulsar.errors import server_error
from weir.security.principal import ANONYMOUS

T = pb.BaseCommand


class LookupCommands(ConnectionState):
    """Where a topic is served, how many partitions it has, the topics of a namespace."""

    async def handle_lookup(self, req: pb.CommandLookupTopic) -> None:
        resp = pb.CommandLookupTopicResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "look up")
            cfg = self._known_topic(t)  # a name of the other kind is refused here already
            owner = await self._owner_url(cfg, t.partition or 0)
        except WeirError as err:
            resp.response = pb.CommandLookupTopicResponse.Failed
            resp.error = server_error(err)
            resp.message = err.message
        else:
            resp.response = pb.CommandLookupTopicResponse.Connect
            resp.authoritative = True
            # served here: the address the client used (one server, or this broker of a
            # cluster); else the owner's own URL, where the client connects next
            resp.proxy_through_service_url = owner is None
            url = owner or self.settings.broker_url
            if self.settings.tls:
                resp.brokerServiceUrlTls = url
            else:
                resp.brokerServiceUrl = url
        self.send(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=resp))

    async def _owner_url(self, cfg: TopicConfig | None, partition: int) -> str | None:
        """Cluster mode: the Pulsar URL of the broker owning the partition when it is not
        this one (None: served here, or not a cluster); NotOwnerError while it moves, or
        when its owner has no Pulsar listener (the client backs off and looks up again)."""
        if cfg is None or self.broker.cluster is None:
            return None
        [o] = await self.broker.owners(cfg.name, [partition])
        if o.local:
            return None
        url = o.endpoints.get("pulsar")
        if not o.broker or not url:
            raise NotOwnerError(
                f"partition {cfg.name}/{partition} has no owner with a Pulsar listener now "
                "(it is moving): look it up again shortly",
                topic=cfg.name,
                partition=partition,
                owner=o.broker,
            )
        return url

    async def handle_partitioned_metadata(self, req: pb.CommandPartitionedTopicMetadata) -> None:
        resp = pb.CommandPartitionedTopicMetadataResponse(request_id=req.request_id)
        try:
            t = self._topic_name(req.topic)
            self._allow(None, t, "look up")
            if t.partition is not None:
                self._known_topic(t)
                n = 0
            else:
                # auto-creation (of the kind the name says): the client creates producers
                # / consumers next
                cfg = await self._topic_for_use(t)
                n = 0 if cfg.partitions == 1 else cfg.partitions
        except WeirError as err:
            resp.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            resp.error = server_error(err)
            resp.message = err.message
        else:
            resp.response = pb.CommandPartitionedTopicMetadataResponse.Success
            resp.partitions = n
        self.send(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))

    async def handle_get_topics(self, req: pb.CommandGetTopicsOfNamespace) -> None:
        me = self.principal or ANONYMOUS
        out: list[str] = []
        mode = req.mode
        for cfg in self.broker.namespace_topics(req.namespace):
            if not self.security.can_see(me, cfg.name):
                continue
            if mode != pb.CommandGetTopicsOfNamespace.ALL and (cfg.kind == NON_PERSISTENT) != (
                mode == pb.CommandGetTopicsOfNamespace.NON_PERSISTENT
            ):
                continue
            base = f"{cfg.kind}://{cfg.name}"  # the kinds are named as Pulsar's domains
            if cfg.partitions == 1:
                out.append(base)
            else:
                out.extend(f"{base}-partition-{p}" for p in range(cfg.partitions))
        filtered = False
        if req.topics_pattern:
            with contextlib.suppress(re.error):
                pattern = re.compile(req.topics_pattern)
                out = [
                    n
                    for n in out
                    if pattern.fullmatch(n) or pattern.fullmatch(n.split("://", 1)[1])
                ]
                filtered = True
        self.send(
            T(
                type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
                    request_id=req.request_id, topics=out, filtered=filtered, changed=True
                ),
            )
        )
