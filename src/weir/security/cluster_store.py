"""Users and grants of a cluster, in ZooKeeper, so every broker checks the same ones.

In embedded mode stored users and grants are rows of the broker's LMDB
(`weir.security.user_store`, `weir.security.grants`). In a cluster
(``storage.mode = "replicated"``) a client may reach any broker, so a user added or a
grant made through one broker must hold on all of them. Under ``{root}/cluster``:

- ``security/users/{name}``: a stored user's record, what `UserRecord.encode` keeps in
  LMDB (the scrypt hash and the SCRAM keys, never a password); the node's version is
  the record's version;
- ``security/grants/{principal}``: the principal's grants, a JSON list of
  ``[kind, permission, resource]``; the node's version is the list's version;
- ``security`` itself: its data changes in the same transaction as every change below
  it (the change mark); every broker watches it and reads users and grants again.

A change is written at the version its writer read (compare-and-set) and retried on a
conflict: two admins granting one principal at once on two brokers both land, one
after the other, never one over the other. A user is created once (the other admin
gets `AlreadyExistsError`). Each broker keeps the records in memory for its checks
(the same `StoredUsers` and `Grants` the fronts ask), replaced after each change mark
it sees; a read is applied only if it started after the last change this broker made
itself (the mark's version tells), so an older read cannot undo a revoke the broker
has answered. Another broker's change holds here within the watch delay (a
ZooKeeper notification and one read); then open streams are checked again
(`Security.changed`) and changed users' tokens are checked against the new record.

Admin calls run the ZooKeeper round trips on the event loop, each bounded by
``timeout`` (they are rare, and already spend scrypt's time there); ZooKeeper not
answering is the retryable `UnavailableError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from weir.broker.cluster.claims import cluster_path
from weir.broker.cluster.zk_transactions import failure
from weir.errors import AlreadyExistsError, NotFoundError, UnavailableError
from weir.security.grants import Grant, Grants, Permission
from weir.security.passwords import hash_password
from weir.security.scram import derive_all
from weir.security.user_store import StoredUsers, UserRecord, _now_ms, check_name, check_password

log = logging.getLogger("weir.security")

OP_TIMEOUT_S = 5.0
MAX_TRIES = 200  # compare-and-set rounds before a write gives up (a storm of admins)


def security_path(root: str) -> str:
    return f"{cluster_path(root)}/security"


def node_name(name: str) -> str:
    """A user's or principal's name as one ZooKeeper node name: no '/', and never '.' or
    '..' (which ZooKeeper refuses); `unquote` reads it back."""
    return quote(name, safe="").replace(".", "%2E")


@dataclass(frozen=True)
class Snapshot:
    """Users and grants as ZooKeeper had them when the change mark was at ``mark``."""

    mark: int
    users: dict[str, UserRecord]
    grants: frozenset[Grant]


def encode_grants(grants: set[Grant]) -> bytes:
    rows = sorted([g.kind, g.permission.value, g.resource] for g in grants)
    return json.dumps(rows, separators=(",", ":")).encode()


def decode_grants(principal: str, raw: bytes) -> set[Grant]:
    return {Grant(principal, Permission(p), r, k) for k, p, r in json.loads(raw or b"[]")}


class SecurityCatalog:
    """The ZooKeeper side: whole reads, and compare-and-set writes with the change mark.

    Every write answers the change mark's version after it (see `ClusterSecurity`)."""

    def __init__(self, zk: KazooClient, root: str, *, timeout: float = OP_TIMEOUT_S) -> None:
        self.zk = zk
        self.path = security_path(root)
        self.users_path = f"{self.path}/users"
        self.grants_path = f"{self.path}/grants"
        self.timeout = timeout

    def _user(self, name: str) -> str:
        return f"{self.users_path}/{node_name(name)}"

    def _grants(self, principal: str) -> str:
        return f"{self.grants_path}/{node_name(principal)}"

    def _wait(self, result: Any) -> Any:
        """A kazoo async result, waited for at most ``timeout``."""
        try:
            return result.get(timeout=self.timeout)
        except (KazooTimeoutError, KazooException) as exc:
            if isinstance(exc, NoNodeError | NodeExistsError | BadVersionError):
                raise
            raise UnavailableError(
                f"cannot reach the cluster's users and grants in ZooKeeper: {exc!r}"
            ) from None

    def ensure_layout(self) -> None:
        for path in (self.users_path, self.grants_path):
            self._wait(self.zk.ensure_path_async(path))

    def read_all(self) -> Snapshot:
        """Every user and grant; the mark is read first, so the snapshot holds every
        change up to it."""
        _, stat = self._wait(self.zk.get_async(self.path))
        users: dict[str, UserRecord] = {}
        for child in self._wait(self.zk.get_children_async(self.users_path)):
            name = unquote(child)
            with contextlib.suppress(NoNodeError):
                raw, _ = self._wait(self.zk.get_async(self._user(name)))
                users[name] = UserRecord.decode(name, raw)
        grants: set[Grant] = set()
        for child in self._wait(self.zk.get_children_async(self.grants_path)):
            principal = unquote(child)
            with contextlib.suppress(NoNodeError):
                raw, _ = self._wait(self.zk.get_async(self._grants(principal)))
                grants |= decode_grants(principal, raw)
        return Snapshot(stat.version, users, frozenset(grants))

    def _commit(self, build: Callable[[Any], None]) -> int | Exception:
        """One transaction: ``build``'s operations and the change mark. The mark's new
        version, or the exception of the operation that failed."""
        tx = self.zk.transaction()
        build(tx)
        tx.set_data(self.path, b"")
        results = self._wait(tx.commit_async())
        cause = failure(results)
        if cause is not None:
            lost: Exception = cause  # kazoo's classes are untyped: keep the type
            if isinstance(cause, NoNodeError | NodeExistsError | BadVersionError):
                return lost
            raise UnavailableError(f"a change of the cluster's users and grants failed: {cause!r}")
        stat = results[-1]
        assert isinstance(stat, ZnodeStat)
        return int(stat.version)

    # ------------------------------------------------------------------ users

    def create_user(self, record: UserRecord) -> int:
        got = self._commit(lambda tx: tx.create(self._user(record.name), record.encode()))
        if isinstance(got, NodeExistsError):
            raise AlreadyExistsError(f"user {record.name!r} already exists")
        if isinstance(got, Exception):
            raise UnavailableError(f"cannot add user {record.name!r}: {got!r}")
        return got

    def update_user(
        self, name: str, change: Callable[[UserRecord], UserRecord]
    ) -> tuple[UserRecord, int]:
        """``change`` applied to the user's record as ZooKeeper has it, written at the
        version read (read again on a conflict)."""
        for _ in range(MAX_TRIES):
            try:
                raw, stat = self._wait(self.zk.get_async(self._user(name)))
            except NoNodeError:
                raise NotFoundError(f"user {name!r} does not exist") from None
            new = change(UserRecord.decode(name, raw))
            data, version = new.encode(), stat.version

            def build(tx: Any, data: bytes = data, version: int = version) -> None:
                tx.set_data(self._user(name), data, version=version)

            got = self._commit(build)
            if not isinstance(got, Exception):
                return new, got
        raise UnavailableError(f"user {name!r} changed {MAX_TRIES} times meanwhile: try again")

    def delete_user(self, name: str) -> int:
        """Delete the user and, in the same transaction, the grants of its name: a user
        added again later under the name starts with none."""
        grants = self._grants(name)
        for _ in range(MAX_TRIES):
            try:
                _, stat = self._wait(self.zk.get_async(grants))
                version: int | None = stat.version
            except NoNodeError:
                version = None

            def build(tx: Any, version: int | None = version) -> None:
                tx.delete(self._user(name))
                if version is not None:
                    tx.delete(grants, version=version)

            got = self._commit(build)
            if not isinstance(got, Exception):
                return got
            if not self._wait(self.zk.exists_async(self._user(name))):
                raise NotFoundError(f"user {name!r} does not exist")
            # the user's grants changed (or went) since the read: read again
        raise UnavailableError(f"user {name!r} changed {MAX_TRIES} times meanwhile: try again")

    # ------------------------------------------------------------------ grants

    def change_grants(
        self, principal: str, change: Callable[[set[Grant]], set[Grant]]
    ) -> tuple[int, int | None]:
        """``change`` applied to the principal's grants as ZooKeeper has them, written at
        the version read and retried on a conflict: (how many grants were added or
        removed, the mark's version; None when nothing changed)."""
        node = self._grants(principal)
        for _ in range(MAX_TRIES):
            try:
                raw, stat = self._wait(self.zk.get_async(node))
                old, version = decode_grants(principal, raw), stat.version
            except NoNodeError:
                old, version = set(), -1
            new = change(set(old))
            if new == old:
                return 0, None
            data = encode_grants(new)

            def build(tx: Any, data: bytes = data, version: int = version, new: Any = new) -> None:
                if version < 0:
                    tx.create(node, data)
                elif not new:
                    tx.delete(node, version=version)
                else:
                    tx.set_data(node, data, version=version)

            got = self._commit(build)
            if not isinstance(got, Exception):
                return len(old ^ new), got
            # another admin changed the principal's grants since the read: read again
        raise UnavailableError(
            f"the grants of {principal!r} changed {MAX_TRIES} times meanwhile: try again"
        )


class ClusterGrants(Grants):
    """`Grants` kept in ZooKeeper; the checks read this broker's copy."""

    def __init__(self, catalog: SecurityCatalog, on_write: Callable[[int], None]) -> None:
        self._catalog = catalog
        self._on_write = on_write
        self._grants: set[Grant] = set()
        self._matchers = {}

    def _written(self, mark: int | None, principal: str, grants: set[Grant]) -> None:
        self._grants = {g for g in self._grants if g.principal != principal} | grants
        if mark is not None:
            self._on_write(mark)

    def add(self, grant: Grant) -> bool:
        kept: set[Grant] = set()

        def change(old: set[Grant]) -> set[Grant]:
            nonlocal kept
            kept = old | {grant}
            return kept

        n, mark = self._catalog.change_grants(grant.principal, change)
        self._written(mark, grant.principal, kept)
        return n > 0

    def remove(self, grant: Grant) -> bool:
        kept: set[Grant] = set()

        def change(old: set[Grant]) -> set[Grant]:
            nonlocal kept
            kept = old - {grant}
            return kept

        n, mark = self._catalog.change_grants(grant.principal, change)
        self._written(mark, grant.principal, kept)
        return n > 0

    def remove_principal(self, principal: str) -> int:
        n, mark = self._catalog.change_grants(principal, lambda _old: set())
        self._written(mark, principal, set())
        return n

    def replace(self, grants: frozenset[Grant]) -> bool:
        """Take what ZooKeeper has; whether anything changed."""
        if grants == self._grants:
            return False
        self._grants = set(grants)
        return True


class ClusterUsers(StoredUsers):
    """`StoredUsers` kept in ZooKeeper; logins and token checks read this broker's copy."""

    def __init__(self, catalog: SecurityCatalog, on_write: Callable[[int], None]) -> None:
        self._catalog = catalog
        self._on_write = on_write
        self._users: dict[str, UserRecord] = {}
        self.on_change: list[Callable[[str], None]] = []

    def add(self, name: str, password: str) -> UserRecord:
        check_name(name)
        check_password(password)
        record = UserRecord(name, hash_password(password), _now_ms(), derive_all(password))
        mark = self._catalog.create_user(record)
        return self._stored(record, mark)

    def set_password(self, name: str, password: str) -> UserRecord:
        check_password(password)  # ZooKeeper, not this copy, says whether the user exists
        hashed, scram = hash_password(password), derive_all(password)
        record, mark = self._catalog.update_user(
            name, lambda old: UserRecord(name, hashed, old.created_ms, scram)
        )
        return self._stored(record, mark)

    def delete(self, name: str) -> None:
        """The user, and the grants of its name (one transaction; `ClusterGrants` hears of
        it from the watch, or at once from the caller's `remove_principal`)."""
        mark = self._catalog.delete_user(name)
        self._users.pop(name, None)
        self._on_write(mark)
        self._changed(name)

    def _stored(self, record: UserRecord, mark: int) -> UserRecord:
        self._users[record.name] = record
        self._on_write(mark)
        self._changed(record.name)
        return record

    def replace(self, users: dict[str, UserRecord]) -> None:
        """Take what ZooKeeper has; each user whose record changed is announced
        (`on_change`: its tokens are checked again)."""
        changed = {
            n for n in users.keys() | self._users.keys() if users.get(n) != self._users.get(n)
        }
        self._users = dict(users)
        for name in sorted(changed):
            self._changed(name)


class ClusterSecurity:
    """Keeps this broker's `ClusterUsers` and `ClusterGrants` up to date from ZooKeeper.

    ``changed`` runs (on the loop) after a change of grants made elsewhere; a changed
    user reaches its `on_change` callbacks. Make it on the event loop that serves calls."""

    def __init__(self, zk: KazooClient, root: str, changed: Callable[[], None]) -> None:
        self.catalog = SecurityCatalog(zk, root)
        self.users = ClusterUsers(self.catalog, self._wrote)
        self.grants = ClusterGrants(self.catalog, self._wrote)
        self._changed = changed
        self._mark = -1  # the newest change mark applied or written here
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._dirty = False
        self._stopped = False

    def _wrote(self, mark: int) -> None:
        self._mark = max(self._mark, mark)

    def load(self) -> None:
        """Lay out the nodes and read everything (at start, blocking: before any call)."""
        self.catalog.ensure_layout()
        self.apply(self.catalog.read_all())

    def follow(self) -> None:
        """Read again after every change mark (a ZooKeeper watch; on reconnect too)."""
        DataWatch(self.catalog.zk, self.catalog.path, self._marked)

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    def _marked(self, *_: object) -> bool | None:
        loop = self._loop
        if self._stopped or loop.is_closed():
            return False  # stop watching
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._schedule)
        return None

    def _schedule(self) -> None:
        if self._stopped:
            return
        self._dirty = True  # a read under way may predate the change: read again
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._follow())

    async def _follow(self) -> None:
        while self._dirty and not self._stopped:
            self._dirty = False
            try:
                snapshot = await asyncio.to_thread(self.catalog.read_all)
            except Exception:  # the watch fires again on the next change, and on reconnect
                log.warning("cannot read the cluster's users and grants", exc_info=True)
                return
            if not self._stopped:
                self.apply(snapshot)

    def apply(self, snapshot: Snapshot) -> None:
        """Take a read of ZooKeeper, unless it began before this broker's own last change."""
        if snapshot.mark < self._mark:
            return  # read before a change this broker made: the watch brings a newer read
        self._mark = snapshot.mark
        self.users.replace(snapshot.users)
        if self.grants.replace(snapshot.grants):
            self._changed()
