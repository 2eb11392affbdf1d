"""Bookies in ZooKeeper: each available bookie is an ephemeral node under ``{root}/bookies/available``.

The node lives as long as the bookie's ZooKeeper session: a bookie that dies or
loses its session for longer than the session timeout drops out of the list, and
writers stop choosing it for new ledgers. The node's value is JSON with the
bookie's labels (``rack``), for placement.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from weir.replication.zk_folders import read_children

log = logging.getLogger("weir.replication.registry")

DEFAULT_ROOT = "/weir"


def available_path(root: str) -> str:
    return f"{root}/bookies/available"


def readonly_path(root: str) -> str:
    return f"{root}/bookies/readonly"


def ledgers_path(root: str) -> str:
    return f"{root}/ledgers"


def available_bookies(
    zk: KazooClient, root: str, *, read_only: bool = False
) -> dict[str, dict[str, str]]:
    """Available (writable) bookie ids (``host:port``) and their labels; the read-only
    ones with ``read_only=True``."""
    base = readonly_path(root) if read_only else available_path(root)
    return {child: json.loads(data or b"{}") for child, data in read_children(zk, base).items()}


class BookieRegistration:
    """Keeps ``{root}/bookies/available/{bookie_id}`` (or ``readonly/``, for a read-only
    bookie) present while the bookie runs.

    Re-creates it after a ZooKeeper session expiry, and replaces the node a
    killed predecessor with the same id left behind (its session not yet expired).
    """

    def __init__(self, zk: KazooClient, root: str, bookie_id: str, labels: dict[str, str]) -> None:
        self.zk = zk
        self.writable_path = f"{available_path(root)}/{bookie_id}"
        self.readonly_path = f"{readonly_path(root)}/{bookie_id}"
        self.value = json.dumps(labels, sort_keys=True).encode()
        self.read_only = False
        self._stopped = False
        self._lock = threading.Lock()
        zk.add_listener(self._on_state)

    @property
    def path(self) -> str:
        return self.readonly_path if self.read_only else self.writable_path

    def register(self) -> None:
        with self._lock:
            if self._stopped:
                return
            other = self.writable_path if self.read_only else self.readonly_path
            with contextlib.suppress(NoNodeError):
                self.zk.delete(other)
            session = self.zk.client_id[0] if self.zk.client_id else None
            try:
                self.zk.create(self.path, self.value, ephemeral=True, makepath=True)
            except NodeExistsError:
                _, stat = self.zk.get(self.path)
                if stat.ephemeralOwner == session:
                    return
                self.zk.delete(self.path, version=stat.version)  # a dead predecessor's node
                self.zk.create(self.path, self.value, ephemeral=True, makepath=True)

    def set_read_only(self, read_only: bool) -> None:
        """Move the registration between ``available`` and ``readonly``."""
        self.read_only = read_only
        self.register()

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED and not self._stopped:
            # listeners must not block kazoo's event thread
            self.zk.handler.spawn(self._register_quietly)

    def _register_quietly(self) -> None:
        try:
            self.register()
        except Exception as exc:  # reconnecting again; the next CONNECTED retries
            log.warning("could not re-register %s: %s", self.path, exc)

    def unregister(self) -> None:
        with self._lock:
            self._stopped = True
            for path in (self.writable_path, self.readonly_path):
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(path)
