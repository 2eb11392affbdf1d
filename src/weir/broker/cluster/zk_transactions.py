"""ZooKeeper multi-op transactions as the cluster's records use them: a record written
only at the version its writer read (compare-and-set), together with a change mark
every broker watches, in one transaction.

kazoo answers a failed transaction with one result per operation: the one that failed
carries the cause, the others `RolledBackError`. `failure` finds the cause;
`write_at_version` turns a lost race into False, so the caller reads again and retries.
A folder of such records is read back with `weir.replication.zk_folders.read_children`.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError


def failure(results: list[Any]) -> Exception | None:
    """The cause of a failed transaction (None: it committed)."""
    failed = [r for r in results if isinstance(r, Exception)]
    if not failed:
        return None
    return next((r for r in failed if not isinstance(r, RolledBackError)), failed[0])


def write_at_version(
    zk: KazooClient, node: str, data: bytes, version: int, mark_path: str, mark: bytes
) -> bool:
    """Write ``node`` at ``version`` (-1: create it) and set the change mark at
    ``mark_path`` in one transaction (blocking: call it off the event loop). False when
    another writer got there first (the version moved, or the node appeared or went);
    any other failure raises."""
    tx = zk.transaction()
    if version < 0:
        tx.create(node, data)
    else:
        tx.set_data(node, data, version=version)
    tx.set_data(mark_path, mark)
    cause = failure(tx.commit())
    if cause is None:
        return True
    if isinstance(cause, BadVersionError | NodeExistsError | NoNodeError):
        return False
    raise cause
