"""`Security`: the one object every front asks who a caller is and what it may do."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from weir.broker.broker import SERVER, Broker
from weir.broker.topics import short_topic
from weir.errors import PermissionDeniedError, UnauthorizedError, WeirError
from weir.security import audit
from weir.security.authenticator import (
    Authenticator,
    BearerToken,
    ClientCertificate,
    Credential,
    UserPassword,
)
from weir.security.cluster_store import ClusterSecurity
from weir.security.grants import GROUP, Grants, Permission
from weir.security.jwt_tokens import JwtVerifier, jwt_expiry, looks_like_jwt
from weir.security.peer_tokens import PEER_MECHANISM, PeerTokens
from weir.security.principal import ANONYMOUS, Principal, current_checks
from weir.security.scram import ScramCredential, ScramExchange
from weir.security.static_users import StaticUsers
from weir.security.throttle import LoginThrottle
from weir.security.tokens import TOKEN_TTL_S, IssuedToken, TokenIssuer
from weir.security.user_store import StoredUsers, burn_time
from weir.storage.kv import Op, put

# An open stream is checked again this long after its token's expiry (a JWT's ``exp`` is
# whole seconds, and the check must see it expired), and then every EXPIRED_RECHECK_S while
# the credential still passes (clock skew) or the stream has not stopped watching.
EXPIRY_MARGIN_S = 0.05
EXPIRED_RECHECK_S = 1.0

SECRET_KEY = b"ydb_auth_secret"  # the name it has had since the YDB front signed tokens


class Security:
    """Authentication and authorization for every front.

    ``authenticate(None)`` is a call without credentials: the anonymous principal
    when ``allow_anonymous`` is on, else an error. Credentials that are present
    must be valid either way. Authorization is enforced when anonymous access is
    off: superusers may do everything, other principals what their grants say. A
    server that serves anonymous callers is open, and every caller may do everything.
    """

    def __init__(
        self,
        users: StaticUsers,
        tokens: TokenIssuer | None = None,
        *,
        allow_anonymous: bool,
        authenticators: Sequence[Authenticator] = (),
        stored: StoredUsers | None = None,
        grants: Grants | None = None,
        superusers: Iterable[str] = (),
        jwt: JwtVerifier | None = None,
        secret: bytes | None = None,
        ttl_s: float = TOKEN_TTL_S,
    ) -> None:
        self.users = users
        self.stored = stored
        self.grants = grants
        self.superusers = frozenset(superusers)
        self.jwt = jwt or JwtVerifier()
        self.tokens = tokens or TokenIssuer(
            secret or secrets.token_bytes(32), self.fingerprint, ttl_s=ttl_s
        )
        self.allow_anonymous = allow_anonymous
        self._decoy_key = secrets.token_bytes(32)  # SCRAM's fake salts for unknown users
        self.throttle = LoginThrottle()
        self.authenticators: list[Authenticator] = list(authenticators)
        self.revision = 0  # one more for each change of users or grants
        # a cluster's: how this broker authenticates to the others (None: it does not),
        # and its users and grants in ZooKeeper (None: embedded mode)
        self.peers: PeerTokens | None = None
        self.shared: ClusterSecurity | None = None
        self._rechecks: set[Callable[[], None]] = set()  # one per open stream
        if stored is not None:
            stored.on_change.append(self.tokens.forget)
            stored.on_change.append(lambda _user: self.changed())

    @classmethod
    def for_broker(
        cls,
        broker: Broker,
        *,
        ttl_s: float = TOKEN_TTL_S,
        superusers: Iterable[str] = (),
        jwt_secret: str = "",
        jwt_public_key_file: Path | None = None,
        jwt_audience: str = "",
        cluster_secret: str = "",
    ) -> Security:
        """Static users and the anonymous rule from the broker's config; stored users, grants
        and the token secret from its ``server`` table (the secret is made on first use, so
        tokens outlive a restart). In a cluster, stored users and grants are the cluster's,
        in ZooKeeper (`weir.security.cluster_store`), and with ``cluster_secret``
        (``auth.cluster_secret``) tokens are signed with a key derived from it, so a token
        one broker issued is valid on every broker, and brokers authenticate to each other
        with it (`weir.security.peer_tokens`). Call it on the event loop that serves calls."""
        kv = broker.store.kv
        raw = kv.get(SERVER, SECRET_KEY)
        if raw is not None:
            secret = bytes(raw)
        else:
            secret = secrets.token_bytes(32)
            broker.store.committer.commit([put(SERVER, SECRET_KEY, secret)])

        def commit(ops: list[Op]) -> None:
            broker.store.committer.commit(ops)

        jwt = JwtVerifier.from_files(jwt_secret, jwt_public_key_file, jwt_audience)
        cluster = broker.cluster
        if cluster is None:
            return cls(
                StaticUsers(broker.config.users),
                allow_anonymous=broker.config.allow_anonymous,
                stored=StoredUsers(kv, SERVER, commit),
                grants=Grants(kv, SERVER, commit),
                superusers=superusers,
                jwt=jwt,
                secret=secret,
                ttl_s=ttl_s,
            )
        peers = PeerTokens(cluster_secret, cluster.broker_id) if cluster_secret else None
        holder: list[Security] = []
        shared = ClusterSecurity(
            cluster.client.zk, broker.config.cluster_root, lambda: holder[0].changed()
        )
        shared.load()
        security = cls(
            StaticUsers(broker.config.users),
            allow_anonymous=broker.config.allow_anonymous,
            authenticators=[peers] if peers is not None else [],
            stored=shared.users,
            grants=shared.grants,
            superusers=superusers,
            jwt=jwt,
            secret=peers.user_token_key() if peers is not None else secret,
            ttl_s=ttl_s,
        )
        security.peers = peers
        security.shared = shared
        holder.append(security)
        shared.follow()
        return security

    # ------------------------------------------------------------------ authentication

    def fingerprint(self, user: str) -> bytes | None:
        """What tokens of ``user`` are bound to (None: no such user, its tokens are void)."""
        found = self.users.fingerprint(user)
        if found is None and self.stored is not None:
            found = self.stored.fingerprint(user)
        return found

    def login(self, user: str, password: str, peer: str = "") -> IssuedToken:
        """A token for a user and password; UnauthorizedError if they are wrong, or while
        failed attempts for the user (or from ``peer``) are being slowed down."""
        return self.tokens.issue(self.check_password(user, password, peer))

    def check_password(self, user: str, password: str, peer: str = "") -> Principal:
        """The principal of a user and password (a login without a token: SASL PLAIN),
        throttled and audited as `login`. Slow on purpose (scrypt): call it off the loop."""
        keys = [f"user:{user[:256]}"] + ([f"addr:{peer}"] if peer else [])
        try:
            self.throttle.check(keys)
        except UnauthorizedError:
            audit.event("login_throttled", user=user[:256], peer=peer)
            raise
        try:
            principal = self._password(UserPassword(user, password))
        except UnauthorizedError:
            self.throttle.failed(keys, "bad_password")
            audit.event("login_failed", user=user[:256], peer=peer)
            raise
        self.throttle.succeeded(keys)
        return principal

    def scram_exchange(self, mechanism: str) -> ScramExchange:
        """A SCRAM login (SASL SCRAM-SHA-256/512) against static and stored users; finish it
        with `scram_finish`, which throttles and audits as `login`."""

        def lookup(user: str, mech: str) -> ScramCredential | None:
            found = self.users.scram(user, mech)
            if found is None and self.stored is not None and user not in self.users:
                found = self.stored.scram(user, mech)
            return found

        return ScramExchange(mechanism, lookup, self._decoy_key)

    def scram_finish(
        self, exchange: ScramExchange, message: bytes, peer: str = ""
    ) -> tuple[bytes, Principal]:
        """The server's final SCRAM message and the principal it proved; UnauthorizedError
        for a wrong proof (or while this user's or address's failures are slowed down)."""
        user = exchange.user
        keys = [f"user:{user[:256]}"] + ([f"addr:{peer}"] if peer else [])
        try:
            self.throttle.check(keys)
        except UnauthorizedError:
            audit.event("login_throttled", user=user[:256], peer=peer)
            raise
        try:
            reply = exchange.final(message)
        except UnauthorizedError:
            self.throttle.failed(keys, "bad_password")
            audit.event("login_failed", user=user[:256], peer=peer)
            raise
        self.throttle.succeeded(keys)
        return reply, Principal(user, "password")

    def _password(self, credential: UserPassword) -> Principal:
        if credential.user in self.users:
            principal = self.users.authenticate(credential)
            assert principal is not None
            return principal
        if self.stored is not None:
            found = self.stored.authenticate(credential)
            if found is not None:
                return found
        burn_time(credential.password)  # as long as a real check: no user enumeration
        raise UnauthorizedError("Invalid user or password")

    def authenticate(self, credential: Credential | None) -> Principal:
        """The principal the credential proves (anonymous for none, when allowed)."""
        if credential is None:
            if not self.allow_anonymous:
                self.throttle.count("no_credentials")
                audit.event("auth_failed", reason="no_credentials")
                raise UnauthorizedError(
                    "authentication required: log in with a user and password "
                    "(anonymous access is off on this server)"
                )
            return ANONYMOUS
        if isinstance(credential, UserPassword):
            try:
                return self._password(credential)
            except UnauthorizedError:
                self.throttle.count("bad_password")
                raise
        if isinstance(credential, ClientCertificate):
            return Principal(credential.subject, "mtls")
        for authenticator in self.authenticators:
            principal = authenticator.authenticate(credential)
            if principal is not None:
                return principal
        assert isinstance(credential, BearerToken)
        try:
            if looks_like_jwt(credential.token):
                found = self.jwt.authenticate(credential)
            else:
                found = self.tokens.authenticate(credential)
        except UnauthorizedError as err:
            self.throttle.count("bad_token")
            audit.event("auth_failed", reason="bad_token", error=err.message)
            raise
        if found is None:  # pragma: no cover - both answer or raise for a bearer token
            raise UnauthorizedError(f"unsupported auth {credential.name}")
        return found

    # ------------------------------------------------------------------ changes

    def changed(self) -> None:
        """Users or grants changed: every open stream checks its caller again, now, before
        the call that made the change answers (so no write after a revoke's answer lands)."""
        self.revision += 1
        for recheck in list(self._rechecks):
            recheck()

    def on_change(self, recheck: Callable[[], None]) -> Callable[[], None]:
        """Run ``recheck`` on every change until the returned function is called."""
        self._rechecks.add(recheck)
        return lambda: self._rechecks.discard(recheck)

    def expires_at(self, credential: Credential | None) -> float | None:
        """When ``credential`` stops proving its principal by itself (epoch seconds): the
        expiry of a JWT or of a weir token; None for what does not expire (a password, a
        client certificate, no credential)."""
        if not isinstance(credential, BearerToken):
            return None
        if looks_like_jwt(credential.token):
            return jwt_expiry(credential.token)
        return TokenIssuer.expiry(credential.token)

    def watch(
        self, recheck: Callable[[], None], credential: Callable[[], Credential | None]
    ) -> Callable[[], None]:
        """Run ``recheck`` (an open stream's check of its caller) on every change of users or
        grants, and when the stream's credential expires, until the returned function is
        called. ``credential`` is asked again after each expiry check: a stream whose client
        renewed its token (YDB's update_token_request) is then watched until the new one
        expires. Call it on the event loop the stream runs on."""
        loop = asyncio.get_running_loop()
        stop_changes = self.on_change(recheck)
        timer: asyncio.TimerHandle | None = None
        stopped = False

        def arm() -> None:
            nonlocal timer
            expiry = self.expires_at(credential())
            if stopped or expiry is None:
                return
            left = expiry - time.time()
            delay = left + EXPIRY_MARGIN_S if left > 0 else EXPIRED_RECHECK_S
            timer = loop.call_later(delay, expired)

        def expired() -> None:
            if not stopped:
                recheck()
                arm()

        def stop() -> None:
            nonlocal stopped
            stopped = True
            stop_changes()
            if timer is not None:
                timer.cancel()

        arm()
        return stop

    def still_allowed(
        self,
        credential: Credential | None,
        principal: Principal,
        checks: list[tuple[object, str, str]],
    ) -> WeirError | None:
        """Why ``principal`` may no longer do what its open stream does (its credential is
        refused now, or one of the ``checks`` it passed fails); None: it still may."""
        try:
            self.authorize_again(self.authenticate(credential), checks)
        except WeirError as err:
            audit.event("stream_ended", principal=principal.name, error=err.message)
            return err
        return None

    def authorize_again(self, principal: Principal, checks: list[tuple[object, str, str]]) -> None:
        """Ask again each question a stream's checks recorded (`authorize` and
        `authorize_group`); PermissionDeniedError for the first one refused now."""
        for permission, resource, operation in list(checks):
            if permission == GROUP:  # resource: a consumer group's name
                self.authorize_group(principal, resource, operation, record=False)
                continue
            assert permission is None or isinstance(permission, Permission)
            self.authorize(principal, permission, resource, operation, record=False)

    # ------------------------------------------------------------------ authorization

    @property
    def enforcing(self) -> bool:
        """Whether grants are checked: anonymous access off and superusers configured."""
        return not self.allow_anonymous and bool(self.superusers)

    def is_superuser(self, principal: Principal) -> bool:
        if not self.enforcing or principal.mechanism == PEER_MECHANISM:
            return True  # another broker of the cluster, asking for a client it checked
        return not principal.anonymous and principal.name in self.superusers

    def permissions(self, principal: Principal, topic: str) -> set[Permission]:
        if self.is_superuser(principal):
            return set(Permission)
        if principal.anonymous or self.grants is None:
            return set()
        return self.grants.permissions(principal.name, topic)

    def can_see(self, principal: Principal, topic: str) -> bool:
        """Any grant on the topic lets the principal describe it and see it in listings."""
        return bool(self.permissions(principal, topic))

    def authorize(
        self,
        principal: Principal,
        permission: Permission | None,
        topic: str,
        operation: str,
        *,
        record: bool = True,
    ) -> None:
        """Raise PermissionDeniedError unless ``principal`` may do ``operation`` on ``topic``
        (canonical name); ``permission`` None: any grant on the topic will do (describe).

        Checked before the topic is looked up, so the answer is the same whether or not it
        exists: a refusal tells nothing about topics the principal cannot see.
        """
        checks = current_checks.get() if record else None
        if checks is not None:  # a stream: made again when users or grants change
            checks.append((permission, topic, operation))
        held = self.permissions(principal, topic)
        if (permission is None and held) or permission in held:
            if permission is Permission.ADMIN:
                audit.event(
                    "admin_allowed", principal=principal.name, operation=operation, topic=topic
                )
            return
        audit.event("denied", principal=principal.name, operation=operation, topic=topic)
        needs = f"the {permission.value} permission" if permission else "a grant"
        raise PermissionDeniedError(
            f"permission denied: {operation} topic {short_topic(topic)!r} needs {needs} "
            f"({_who(principal)} has none)"
        )

    def group_allowed(self, principal: Principal, group: str) -> bool:
        """Whether ``principal`` may read, commit and describe under consumer group
        ``group``: a superuser, or one with no group grant at all (the opt-in rule), or
        one whose group grants give consume on it."""
        if self.is_superuser(principal):
            return True
        if principal.anonymous or self.grants is None:
            return False
        held = self.grants.group_permissions(principal.name, group)
        return held is None or Permission.CONSUME in held

    def authorize_group(
        self, principal: Principal, group: str, operation: str, *, record: bool = True
    ) -> None:
        """Raise PermissionDeniedError unless ``principal`` may ``operation`` under consumer
        group (subscription, Kafka group id) ``group``; the topic is checked apart, with
        `authorize`. Checked before the group is looked up."""
        checks = current_checks.get() if record else None
        if checks is not None:
            checks.append((GROUP, group, operation))
        if self.group_allowed(principal, group):
            return
        audit.event("denied", principal=principal.name, operation=operation, group=group)
        raise PermissionDeniedError(
            f"permission denied: {operation} group {group!r} needs the consume permission "
            f"on group:{group} ({_who(principal)} has none)"
        )

    def tenancy_permissions(
        self, principal: Principal, tenant: str, namespace: str = ""
    ) -> set[Permission]:
        """What ``principal`` may do on a tenant, or on namespace ``tenant/name``, by its
        tenant and namespace grants (all, for a superuser)."""
        if self.is_superuser(principal):
            return set(Permission)
        if principal.anonymous or self.grants is None:
            return set()
        return self.grants.tenancy_permissions(principal.name, tenant, namespace)

    def authorize_tenancy(
        self,
        principal: Principal,
        permission: Permission | None,
        tenant: str,
        namespace: str,
        operation: str,
    ) -> None:
        """Raise PermissionDeniedError unless ``principal`` may do ``operation`` on a tenant
        (``namespace`` empty) or on the namespace ``tenant/name``: a tenant grant covers the
        tenant and its namespaces, a namespace grant its namespace. ``permission`` None: any
        such grant will do (describe). Checked before the tenant or namespace is looked up."""
        held = self.tenancy_permissions(principal, tenant, namespace)
        if (permission is None and held) or permission in held:
            if permission is Permission.ADMIN:
                audit.event(
                    "admin_allowed",
                    principal=principal.name,
                    operation=operation,
                    resource=namespace or tenant,
                )
            return
        what = f"namespace {namespace!r}" if namespace else f"tenant {tenant!r}"
        audit.event("denied", principal=principal.name, operation=operation, resource=what)
        needs = f"the {permission.value} permission" if permission else "a grant"
        raise PermissionDeniedError(
            f"permission denied: {operation} {what} needs {needs} on it or its tenant "
            f"({_who(principal)} has none)"
        )

    def require_superuser(self, principal: Principal, operation: str) -> None:
        if not self.is_superuser(principal):
            audit.event("denied", principal=principal.name, operation=operation)
            raise PermissionDeniedError(
                f"permission denied: {operation} needs a superuser ({_who(principal)} is not one)"
            )


def _who(principal: Principal) -> str:
    return "anonymous" if principal.anonymous else f"{principal.name!r}"
