"""A ZooKeeper folder of records read back: every child with its data.

The bookie registry lists its bookies this way, and the broker's cluster records
(producer epochs, schemas) their entries; one listing, then one read per child.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError


def read_children(zk: KazooClient, path: str) -> dict[str, bytes]:
    """Every child of ``path`` with its data (blocking: call it off the event loop); none
    when ``path`` does not exist, and a child removed between the listing and its read is
    left out."""
    out: dict[str, bytes] = {}
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return out
    for child in children:
        try:
            raw, _ = zk.get(f"{path}/{child}")
        except NoNodeError:
            continue
        out[child] = raw or b""
    return out
