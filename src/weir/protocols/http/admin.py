"""The Pulsar-style admin REST API (``/admin/v2``) on the server's HTTP port.

The calls Pulsar users script (`pulsar-admin`, the admin clients, plain ``curl``), with
Pulsar's paths, JSON bodies and status codes, each a broker facade call: tenants,
namespaces and their policies (deduplication, retention, messageTTL, backlogQuota),
topics of both domains (create, partitioned or not, grow partitions, delete, list, stats,
internalStats: ``/persistent/...`` for weir's persistent topics, ``/non-persistent/...``
for its non-persistent ones, a name of the other kind is not found), subscriptions
(list, create, delete, reset cursor, skip: the last three for persistent topics) and
schemas. Compaction (trigger and status) maps onto weir's compaction.

Authentication is the server's: ``Authorization: Bearer <token>`` (weir tokens and
JWTs) or ``Basic`` (a weir user); tenants and namespaces need a superuser, topic
changes the admin permission, subscription changes consume, reads any grant.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from weir.broker.broker import Broker
from weir.broker.subscriptions import InitialPosition, SubscriptionType
from weir.broker.topics import NON_PERSISTENT, PERSISTENT, TopicConfig, short_topic
from weir.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConsumerBusyError,
    NotEmptyError,
    NotFoundError,
    PermissionDeniedError,
    UnauthorizedError,
    UnavailableError,
    UnknownTopicError,
    WeirError,
)
from weir.security import Security
from weir.security.authenticator import BearerToken, Credential, UserPassword
from weir.security.grants import Permission
from weir.security.principal import Principal
from weir.storage.batch import iter_batches

PREFIX = "/admin/v2"
MAX_BODY = 1 << 20
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _status(err: WeirError) -> int:
    if isinstance(err, UnauthorizedError):
        return 401
    if isinstance(err, PermissionDeniedError):
        return 403
    if isinstance(err, NotFoundError):
        return 404
    if isinstance(err, AlreadyExistsError):
        return 409
    if isinstance(err, NotEmptyError | ConsumerBusyError):
        return 412
    if err.retryable:
        return 503
    if isinstance(err, BadRequestError):
        return 400
    return 500


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


def _no_content() -> web.Response:
    return web.Response(status=204)


class PulsarAdmin:
    def __init__(
        self, broker: Callable[[], Broker | None], security: Callable[[], Security]
    ) -> None:
        self._broker = broker
        self._security = security

    # ------------------------------------------------------------------ wiring

    def mount(self, app: web.Application) -> None:
        r = app.router
        domain = PREFIX + "/{domain:persistent|non-persistent}/{tenant}/{namespace}"
        t = domain + "/{topic}"
        ns = PREFIX + "/namespaces/{tenant}/{namespace}"
        routes: list[tuple[str, str, Handler]] = [
            ("GET", PREFIX + "/clusters", self.clusters),
            ("GET", PREFIX + "/tenants", self.tenants),
            ("GET", PREFIX + "/tenants/{tenant}", self.tenant),
            ("PUT", PREFIX + "/tenants/{tenant}", self.create_tenant),
            ("POST", PREFIX + "/tenants/{tenant}", self.update_tenant),
            ("DELETE", PREFIX + "/tenants/{tenant}", self.delete_tenant),
            ("GET", PREFIX + "/namespaces/{tenant}", self.namespaces),
            ("GET", ns, self.namespace_policies),
            ("PUT", ns, self.create_namespace),
            ("DELETE", ns, self.delete_namespace),
            ("GET", ns + "/topics", self.namespace_topics),
            ("GET", ns + "/deduplication", self.get_dedup),
            ("POST", ns + "/deduplication", self.set_dedup),
            ("DELETE", ns + "/deduplication", self.unset("deduplication")),
            ("GET", ns + "/retention", self.get_retention),
            ("POST", ns + "/retention", self.set_retention),
            ("DELETE", ns + "/retention", self.unset("retention_ms", "retention_bytes")),
            ("GET", ns + "/messageTTL", self.get_ttl),
            ("POST", ns + "/messageTTL", self.set_ttl),
            ("DELETE", ns + "/messageTTL", self.unset("message_ttl_ms")),
            ("GET", ns + "/backlogQuotaMap", self.get_quota),
            ("POST", ns + "/backlogQuota", self.set_quota),
            ("DELETE", ns + "/backlogQuota", self.unset("backlog_quota_bytes")),
            ("GET", domain, self.list_topics),
            ("GET", domain + "/partitioned", self.list_partitioned),
            ("PUT", t, self.create_topic),
            ("DELETE", t, self.delete_topic),
            ("PUT", t + "/partitions", self.create_partitioned),
            ("POST", t + "/partitions", self.update_partitions),
            ("GET", t + "/partitions", self.get_partitions),
            ("DELETE", t + "/partitions", self.delete_topic),
            ("GET", t + "/stats", self.stats),
            ("GET", t + "/partitioned-stats", self.stats),
            ("GET", t + "/internalStats", self.internal_stats),
            ("GET", t + "/subscriptions", self.subscriptions),
            ("PUT", t + "/subscription/{sub}", self.create_subscription),
            ("DELETE", t + "/subscription/{sub}", self.delete_subscription),
            ("POST", t + "/subscription/{sub}/resetcursor/{timestamp}", self.reset_to_time),
            ("POST", t + "/subscription/{sub}/resetcursor", self.reset_to_id),
            ("POST", t + "/subscription/{sub}/skip/{count}", self.skip),
            ("POST", t + "/subscription/{sub}/skip_all", self.skip_all),
            ("POST", t + "/terminate", self.terminate),
            ("PUT", t + "/compaction", self.trigger_compaction),
            ("GET", t + "/compaction", self.compaction_status),
            ("GET", PREFIX + "/schemas/{tenant}/{namespace}/{topic}/schema", self.get_schema),
            ("DELETE", PREFIX + "/schemas/{tenant}/{namespace}/{topic}/schema", self.delete_schema),
        ]
        for method, path, handler in routes:
            r.add_route(method, path, self._guard(handler))
        r.add_route("*", PREFIX + "/{rest:.*}", self._unknown)

    async def _unknown(self, request: web.Request) -> web.Response:
        return _json(
            {"reason": f"{request.method} {request.path} is not an admin call weir serves"}, 405
        )

    def _guard(self, handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except WeirError as err:
                return _json({"reason": err.message}, _status(err))
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as err:
                return _json({"reason": f"bad request: {err!s:.200}"}, 400)

        return run

    # ------------------------------------------------------------------ plumbing

    @property
    def broker(self) -> Broker:
        b = self._broker()
        if b is None or b.closed:
            raise UnavailableError("the server is starting or stopping")
        return b

    def _principal(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization", "")
        cred: Credential | None = None
        if header:
            kind, _, value = header.partition(" ")
            if kind.lower() == "bearer" and value.strip():
                cred = BearerToken(value.strip())
            elif kind.lower() == "basic":
                try:
                    user, sep, pw = base64.b64decode(value.strip()).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    raise UnauthorizedError("bad Basic authorization header") from None
                if not sep:
                    raise UnauthorizedError("Basic authorization needs user:password")
                cred = UserPassword(user, pw)
            else:
                raise UnauthorizedError("Authorization must be 'Bearer <token>' or 'Basic ...'")
        return self._security().authenticate(cred)

    def _superuser(self, request: web.Request, what: str) -> None:
        self._security().require_superuser(self._principal(request), what)

    def _namespace_admin(self, request: web.Request, operation: str) -> None:
        """Admin on the namespace of the path, or on its tenant (or a superuser)."""
        tenant = request.match_info["tenant"]
        self._security().authorize_tenancy(
            self._principal(request), Permission.ADMIN, tenant, self._ns(request), operation
        )

    def _allow(self, request: web.Request, permission: Permission | None, what: str) -> str:
        name = self._topic_name(request)
        principal = self._principal(request)
        self._security().authorize(principal, permission, name, what)
        sub = request.match_info.get("sub")
        if sub:  # a subscription is a consumer group: it needs a group grant too
            self._security().authorize_group(principal, sub, what)
        return name

    @staticmethod
    def _topic_name(request: web.Request) -> str:
        m = request.match_info
        topic = m["topic"]
        return f"{m['tenant']}/{m['namespace']}/{topic}"

    @staticmethod
    def _ns(request: web.Request) -> str:
        return f"{request.match_info['tenant']}/{request.match_info['namespace']}"

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            raise BadRequestError(f"request body over {MAX_BODY} bytes")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise BadRequestError("the request body is not JSON") from None

    def _topic(self, request: web.Request, permission: Permission | None, what: str) -> TopicConfig:
        name = self._allow(request, permission, what)
        base = name
        if "-partition-" in name:
            base = name.rsplit("-partition-", 1)[0]
        return self._of_kind(request, self.broker.topic(base))

    @staticmethod
    def _kind(request: web.Request) -> str:
        """The topic kind the path's domain names."""
        return NON_PERSISTENT if request.match_info["domain"] == "non-persistent" else PERSISTENT

    def _of_kind(self, request: web.Request, cfg: TopicConfig) -> TopicConfig:
        """``cfg`` when it is of the path's kind: weir keeps one topic per name, so the
        other domain's name of it is a topic that does not exist (as in Pulsar, where
        ``persistent://x`` and ``non-persistent://x`` are different topics)."""
        if cfg.kind != self._kind(request):
            raise UnknownTopicError(
                f"topic {short_topic(cfg.name)!r} is {cfg.kind}: its admin paths are "
                f"{PREFIX}/{cfg.kind}/..."
            )
        return cfg

    def unset(self, *keys: str) -> Handler:
        async def remove(request: web.Request) -> web.Response:
            self._namespace_admin(request, "set the policies of")
            await self.broker.set_namespace_policies(self._ns(request), remove=keys)
            return _no_content()

        return remove

    # ------------------------------------------------------------------ tenants

    async def clusters(self, request: web.Request) -> web.Response:
        return _json(["weir"])

    async def tenants(self, request: web.Request) -> web.Response:
        me = self._principal(request)
        security = self._security()
        return _json(
            [t.name for t in self.broker.list_tenants() if security.tenancy_permissions(me, t.name)]
        )

    async def tenant(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        self._security().authorize_tenancy(self._principal(request), None, tenant, "", "describe")
        self.broker.describe_tenant(tenant)
        return _json({"adminRoles": [], "allowedClusters": ["weir"]})

    async def create_tenant(self, request: web.Request) -> web.Response:
        self._superuser(request, "create a tenant")
        await self.broker.create_tenant(request.match_info["tenant"])
        return _no_content()

    async def update_tenant(self, request: web.Request) -> web.Response:
        self._superuser(request, "update a tenant")
        self.broker.describe_tenant(request.match_info["tenant"])
        return _no_content()

    async def delete_tenant(self, request: web.Request) -> web.Response:
        self._superuser(request, "delete a tenant")
        await self.broker.delete_tenant(request.match_info["tenant"])
        return _no_content()

    # ------------------------------------------------------------------ namespaces

    async def namespaces(self, request: web.Request) -> web.Response:
        me = self._principal(request)
        security = self._security()
        tenant = request.match_info["tenant"]
        self.broker.describe_tenant(tenant)
        return _json(
            [
                n.path
                for n in self.broker.list_namespaces(tenant)
                if security.tenancy_permissions(me, tenant, n.path)
            ]
        )

    async def create_namespace(self, request: web.Request) -> web.Response:
        self._namespace_admin(request, "create")
        await self.broker.create_namespace(self._ns(request))
        return _no_content()

    async def delete_namespace(self, request: web.Request) -> web.Response:
        self._namespace_admin(request, "delete")
        await self.broker.delete_namespace(self._ns(request))
        return _no_content()

    def _effective(self, request: web.Request) -> dict[str, Any]:
        path = self._ns(request)
        self._security().authorize_tenancy(
            self._principal(request), None, request.match_info["tenant"], path, "describe"
        )
        self.broker.describe_namespace(path)
        return self.broker.namespace_policies(path)

    async def namespace_policies(self, request: web.Request) -> web.Response:
        p = self._effective(request)
        return _json(
            {
                "deduplicationEnabled": p["deduplication"],
                "retention_policies": _retention(p),
                "message_ttl_in_seconds": None
                if p["message_ttl_ms"] is None
                else p["message_ttl_ms"] // 1000,
                "backlog_quota_map": _quota(p),
            }
        )

    async def namespace_topics(self, request: web.Request) -> web.Response:
        """Pulsar's ``?mode=PERSISTENT`` (the default), ``NON_PERSISTENT`` or ``ALL``."""
        mode = request.query.get("mode", "PERSISTENT").upper()
        kinds = {"PERSISTENT": (PERSISTENT,), "NON_PERSISTENT": (NON_PERSISTENT,)}.get(
            mode, (PERSISTENT, NON_PERSISTENT)
        )
        if mode not in ("PERSISTENT", "NON_PERSISTENT", "ALL"):
            raise BadRequestError("mode is PERSISTENT, NON_PERSISTENT or ALL")
        return _json(self._names(request, kinds, partitioned_only=False))

    async def _set(self, request: web.Request, changes: dict[str, Any]) -> web.Response:
        self._namespace_admin(request, "set the policies of")
        await self.broker.set_namespace_policies(self._ns(request), changes)
        return _no_content()

    async def get_dedup(self, request: web.Request) -> web.Response:
        return _json(self._effective(request)["deduplication"])

    async def set_dedup(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, bool):
            raise BadRequestError("the body is true or false")
        return await self._set(request, {"deduplication": body})

    async def get_retention(self, request: web.Request) -> web.Response:
        return _json(_retention(self._effective(request)))

    async def set_retention(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequestError(
                'the body is {"retentionTimeInMinutes": .., "retentionSizeInMB": ..}'
            )
        minutes = body.get("retentionTimeInMinutes", -1)
        mb = body.get("retentionSizeInMB", -1)
        return await self._set(
            request,
            {
                "retention_ms": None if minutes < 0 else int(minutes) * 60_000,
                "retention_bytes": None if mb < 0 else int(mb) << 20,
            },
        )

    async def get_ttl(self, request: web.Request) -> web.Response:
        ttl = self._effective(request)["message_ttl_ms"]
        return _json(None if ttl is None else ttl // 1000)

    async def set_ttl(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, int) or isinstance(body, bool) or body < 0:
            raise BadRequestError("the body is a number of seconds (0: no TTL)")
        return await self._set(request, {"message_ttl_ms": body * 1000 if body else None})

    async def get_quota(self, request: web.Request) -> web.Response:
        return _json(_quota(self._effective(request)))

    async def set_quota(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict) or "limitSize" not in body:
            raise BadRequestError('the body is {"limitSize": bytes, "policy": ...}')
        size = int(body["limitSize"])
        return await self._set(request, {"backlog_quota_bytes": None if size < 0 else size})

    # ------------------------------------------------------------------ topics

    def _names(
        self, request: web.Request, kinds: tuple[str, ...], *, partitioned_only: bool
    ) -> list[str]:
        me = self._principal(request)
        sec = self._security()
        out = []
        for cfg in self.broker.namespace_topics(self._ns(request)):
            if cfg.kind not in kinds or not sec.can_see(me, cfg.name):
                continue
            base = f"{cfg.kind}://{cfg.name}"
            if partitioned_only:
                if cfg.partitions > 1:
                    out.append(base)
            elif cfg.partitions == 1:
                out.append(base)
            else:
                out.extend(f"{base}-partition-{p}" for p in range(cfg.partitions))
        return out

    async def list_topics(self, request: web.Request) -> web.Response:
        return _json(self._names(request, (self._kind(request),), partitioned_only=False))

    async def list_partitioned(self, request: web.Request) -> web.Response:
        return _json(self._names(request, (self._kind(request),), partitioned_only=True))

    async def create_topic(self, request: web.Request) -> web.Response:
        name = self._allow(request, Permission.ADMIN, "create")
        await self.broker.create_topic(name, partitions=1, kind=self._kind(request))
        return _no_content()

    async def create_partitioned(self, request: web.Request) -> web.Response:
        name = self._allow(request, Permission.ADMIN, "create")
        n = await self._body(request)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadRequestError("the body is the number of partitions (1 or more)")
        await self.broker.create_topic(name, partitions=n, kind=self._kind(request))
        return _no_content()

    async def update_partitions(self, request: web.Request) -> web.Response:
        name = self._allow(request, Permission.ADMIN, "alter")
        n = await self._body(request)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadRequestError("the body is the number of partitions")
        self._of_kind(request, self.broker.topic(name))
        await self.broker.alter_topic(name, partitions=n)
        return _no_content()

    async def get_partitions(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, None, "describe")
        return _json({"partitions": 0 if cfg.partitions == 1 else cfg.partitions})

    async def delete_topic(self, request: web.Request) -> web.Response:
        name = self._allow(request, Permission.ADMIN, "drop")
        force = request.query.get("force", "false").lower() == "true"
        cfg = self._of_kind(request, self.broker.topic(name))
        if not force:
            busy = [s.name for s in self.broker.list_subscriptions(cfg.name) if s.consumers]
            if busy:
                raise ConsumerBusyError(
                    f"topic has consumers on {busy[0]!r}: close them, or delete with force=true"
                )
        await self.broker.drop_topic(name)
        return _no_content()

    async def stats(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, None, "describe")
        if cfg.kind == NON_PERSISTENT:
            return _json(self._live_stats(cfg))
        parts = self.broker.partitions(cfg.name)
        subs = {}
        for info in self.broker.list_subscriptions(cfg.name):
            subs[info.name] = {
                "type": _sub_type(info.type),
                "msgBacklog": info.backlog,
                "unackedMessages": info.unacked,
                "consumers": [
                    {
                        "consumerName": c.name,
                        "availablePermits": c.permits,
                        "unackedMessages": c.unacked,
                    }
                    for c in info.consumers
                ],
            }
        return _json(
            {
                "msgInCounter": sum(p.end_offset for p in parts),
                "storageSize": sum(p.size_bytes for p in parts),
                "backlogSize": sum(p.size_bytes for p in parts),
                "publishers": [],
                "subscriptions": subs,
                "partitions": {
                    f"persistent://{cfg.name}-partition-{p.partition}": {
                        "msgInCounter": p.end_offset,
                        "storageSize": p.size_bytes,
                    }
                    for p in parts
                }
                if cfg.partitions > 1
                else {},
            }
        )

    def _live_stats(self, cfg: TopicConfig) -> dict[str, Any]:
        """A non-persistent topic's stats: what was published, handed to consumers and
        dropped (a full consumer queue); a subscription's backlog is what its consumers'
        queues on the server hold now. Nothing is stored."""
        parts = self.broker.partitions(cfg.name)
        subs = {
            info.name: {
                "type": _sub_type(info.type),
                "msgBacklog": info.backlog,
                "consumers": [
                    {"consumerName": c.name, "availablePermits": c.permits} for c in info.consumers
                ],
            }
            for info in self.broker.list_subscriptions(cfg.name)
        }
        return {
            "msgInCounter": sum(p.end_offset for p in parts),
            "msgOutCounter": sum(p.delivered_messages for p in parts),
            "msgDropCounter": sum(p.dropped_messages for p in parts),
            "storageSize": 0,
            "backlogSize": 0,
            "publishers": [],
            "subscriptions": subs,
            "partitions": {
                f"non-persistent://{cfg.name}-partition-{p.partition}": {
                    "msgInCounter": p.end_offset,
                    "msgOutCounter": p.delivered_messages,
                    "msgDropCounter": p.dropped_messages,
                }
                for p in parts
            }
            if cfg.partitions > 1
            else {},
        }

    async def internal_stats(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, None, "describe")
        parts = self.broker.partitions(cfg.name)
        if cfg.kind == NON_PERSISTENT:
            # as Pulsar's: entries added, nothing stored, a cursor per subscription
            # that keeps no position
            return _json(
                {
                    "entriesAddedCounter": sum(p.end_offset for p in parts),
                    "numberOfEntries": 0,
                    "totalSize": 0,
                    "cursors": {s.name: {} for s in self.broker.list_subscriptions(cfg.name)},
                }
            )
        cursors = {}
        for info in self.broker.list_subscriptions(cfg.name):
            cursors[info.name] = {
                "markDeletePosition": ",".join(
                    f"{p.partition}:{p.mark_delete}" for p in info.partitions
                ),
                "individuallyDeletedMessages": sum(p.acked_ranges for p in info.partitions),
                "messagesConsumedCounter": sum(
                    p.mark_delete - (parts[p.partition].start_offset) for p in info.partitions
                ),
            }
        return _json(
            {
                "entriesAddedCounter": sum(p.end_offset for p in parts),
                "numberOfEntries": sum(p.end_offset - p.start_offset for p in parts),
                "totalSize": sum(p.size_bytes for p in parts),
                "firstOffsets": [p.start_offset for p in parts],
                "endOffsets": [p.end_offset for p in parts],
                "cursors": cursors,
            }
        )

    async def terminate(self, request: web.Request) -> web.Response:
        """Pulsar's terminate: the topic takes no more messages (producers are refused
        with TopicTerminatedError; a consumer that reads to its end is told so). Answers
        the id of its last message (ledgerId -1 when it holds none). A partitioned
        topic is terminated whole, by its own name (its partitions' names are refused)."""
        cfg = self._topic(request, Permission.ADMIN, "terminate")
        name = request.match_info["topic"]
        if "-partition-" in name or cfg.partitions != 1:
            raise BadRequestError(
                f"topic {short_topic(cfg.name)!r} has {cfg.partitions} partitions: weir "
                "terminates a topic whole, and only one of a single partition here"
            )
        (end,) = await self.broker.terminate_topic(cfg.name)
        actor = self.broker.actor(cfg.name, 0)
        if end <= actor.start_offset:
            return _json({"ledgerId": -1, "entryId": -1, "partitionIndex": -1})
        res = await actor.read_async(end - 1, 1, end)
        base, count = end - 1, 1
        for _, h in iter_batches(res.chunks[0], verify=False) if res.chunks else ():
            if h.base_offset < end <= h.next_offset:
                base, count = h.base_offset, h.record_count
        index = end - 1 - base if count > 1 else -1
        return _json({"ledgerId": 0, "entryId": base, "partitionIndex": -1, "batchIndex": index})

    async def trigger_compaction(self, request: web.Request) -> web.Response:
        """Start a compaction run (Pulsar's triggerCompaction): the whole topic, every
        partition of it, whichever partition the path names."""
        cfg = self._topic(request, Permission.ADMIN, "compact")
        await self.broker.compact(cfg.name)
        return _no_content()

    async def compaction_status(self, request: web.Request) -> web.Response:
        """Pulsar's LongRunningProcessStatus of the topic's last run: NOT_RUN (none since
        the server started), RUNNING, SUCCESS or ERROR with its lastError."""
        cfg = self._topic(request, None, "describe")
        st = self.broker.compaction_status(cfg.name)
        if st.running:
            status = "RUNNING"
        elif st.started_ms == 0:
            status = "NOT_RUN"
        else:
            status = "ERROR" if st.last_error else "SUCCESS"
        return _json({"status": status, "lastError": st.last_error})

    # ------------------------------------------------------------------ subscriptions

    async def subscriptions(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, Permission.CONSUME, "list the subscriptions of")
        return _json([s.name for s in self.broker.list_subscriptions(cfg.name)])

    async def create_subscription(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, Permission.CONSUME, "create a subscription on")
        body = await self._body(request)
        position = InitialPosition.LATEST
        if (isinstance(body, dict) and body.get("entryId", 0) < 0) or body == "earliest":
            position = InitialPosition.EARLIEST
        await self.broker.create_subscription(
            cfg.name, request.match_info["sub"], SubscriptionType.EXCLUSIVE, position
        )
        return _no_content()

    async def delete_subscription(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, Permission.CONSUME, "delete a subscription of")
        force = request.query.get("force", "false").lower() == "true"
        await self.broker.delete_subscription(cfg.name, request.match_info["sub"], force=force)
        return _no_content()

    async def reset_to_time(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, Permission.CONSUME, "seek a subscription of")
        ts = int(request.match_info["timestamp"])
        await self.broker.seek_subscription(cfg.name, request.match_info["sub"], timestamp_ms=ts)
        return _no_content()

    async def reset_to_id(self, request: web.Request) -> web.Response:
        cfg = self._topic(request, Permission.CONSUME, "seek a subscription of")
        body = await self._body(request)
        if not isinstance(body, dict) or "entryId" not in body:
            raise BadRequestError('the body is a message id: {"ledgerId": 0, "entryId": N, ...}')
        offset = int(body["entryId"]) + max(int(body.get("batchIndex", -1)), 0)
        partition = max(int(body.get("partitionIndex", -1)), 0)
        await self.broker.seek_subscription(
            cfg.name, request.match_info["sub"], offsets={partition: offset}
        )
        return _no_content()

    async def _skip(self, request: web.Request, count: int | None) -> web.Response:
        cfg = self._topic(request, Permission.CONSUME, "skip messages of")
        if cfg.kind != PERSISTENT:
            raise BadRequestError(
                f"topic {short_topic(cfg.name)!r} is non-persistent: its subscriptions keep "
                "no backlog to skip"
            )
        sub = request.match_info["sub"]
        info = self.broker.describe_subscription(cfg.name, sub)
        offsets = {}
        for p in info.partitions:
            end = self.broker.actor(cfg.name, p.partition).end_offset
            offsets[p.partition] = end if count is None else min(end, p.mark_delete + count)
        await self.broker.seek_subscription(cfg.name, sub, offsets=offsets)
        return _no_content()

    async def skip(self, request: web.Request) -> web.Response:
        n = int(request.match_info["count"])
        if n < 0:
            raise BadRequestError("skip a number of messages >= 0")
        return await self._skip(request, n)

    async def skip_all(self, request: web.Request) -> web.Response:
        return await self._skip(request, None)

    # ------------------------------------------------------------------ schemas

    async def get_schema(self, request: web.Request) -> web.Response:
        name = self._allow(request, None, "read the schema of")
        found = self.broker.topic_schema(name)
        if found is None:
            raise NotFoundError(f"topic {name!r} has no schema")
        info, version = found
        return _json(
            {
                "version": version,
                "type": _SCHEMA_TYPES.get(info.type, str(info.type)),
                "timestamp": int(time.time() * 1000),
                "data": info.data.decode(errors="replace"),
                "properties": info.properties,
            }
        )

    async def delete_schema(self, request: web.Request) -> web.Response:
        name = self._allow(request, Permission.ADMIN, "delete the schema of")
        await self.broker.delete_schema(name)
        return _no_content()


_SCHEMA_TYPES = {
    0: "BYTES",
    1: "STRING",
    2: "JSON",
    3: "PROTOBUF",
    4: "AVRO",
    15: "KEY_VALUE",
}


def _retention(p: dict[str, Any]) -> dict[str, int]:
    ms, size = p["retention_ms"], p["retention_bytes"]
    return {
        "retentionTimeInMinutes": -1 if ms is None else ms // 60_000,
        "retentionSizeInMB": -1 if size is None else size >> 20,
    }


def _quota(p: dict[str, Any]) -> dict[str, Any]:
    q = p["backlog_quota_bytes"]
    if q is None:
        return {}
    return {"destination_storage": {"limitSize": q, "policy": "producer_exception"}}


def _sub_type(t: SubscriptionType) -> str:
    return {
        SubscriptionType.EXCLUSIVE: "Exclusive",
        SubscriptionType.FAILOVER: "Failover",
        SubscriptionType.SHARED: "Shared",
        SubscriptionType.KEY_SHARED: "Key_Shared",
    }[t]
