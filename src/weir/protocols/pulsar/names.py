"""Pulsar topic names as weir names: ``persistent://tenant/namespace/topic[-partition-N]``.

Pulsar's short forms mean what they mean there: ``orders`` is
``persistent://public/default/orders``, ``tenant/namespace/orders`` the same domain.
A weir topic of one partition is a *non-partitioned* Pulsar topic; a topic of N > 1
partitions is a partitioned one, its partitions named ``<topic>-partition-<i>``.
``non-persistent://`` names parse, and are answered as not served (yet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from weir.errors import BadRequestError

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
_PARTITION = re.compile(r"^(.+)-partition-(\d{1,6})$")


class NotServedError(BadRequestError):
    """A Pulsar feature weir does not serve (yet): answered with NotAllowedError."""

    code = "NOT_SERVED"


@dataclass(frozen=True, slots=True)
class PulsarTopic:
    domain: str
    tenant: str
    namespace: str
    local: str  # without the partition suffix
    partition: int | None  # None: the topic itself (all of it, or its only partition)

    @property
    def weir_name(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.local}"

    @property
    def namespace_path(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def url(self, partition: int | None = None) -> str:
        """The full Pulsar name (of one partition when given)."""
        base = f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"
        return base if partition is None else f"{base}-partition-{partition}"


def parse(name: str) -> PulsarTopic:
    """A Pulsar topic name in any of its forms; BadRequestError for a malformed one."""
    if not isinstance(name, str) or not name or len(name) > 1000:
        raise BadRequestError(f"bad topic name {name!r}")
    domain = PERSISTENT
    rest = name
    if "://" in name:
        domain, _, rest = name.partition("://")
        if domain not in (PERSISTENT, NON_PERSISTENT):
            raise BadRequestError(
                f"bad topic name {name!r}: the domain is persistent:// or non-persistent://"
            )
    parts = rest.split("/")
    if len(parts) == 1 and "://" not in name:
        tenant, namespace, local = "public", "default", parts[0]
    elif len(parts) == 3:
        tenant, namespace, local = parts
    elif len(parts) == 4:  # the old form with a cluster: tenant/cluster/namespace/topic
        raise BadRequestError(f"topic name {name!r} names a cluster: use tenant/namespace/topic")
    else:
        raise BadRequestError(
            f"bad topic name {name!r}: use 'topic' or 'persistent://tenant/namespace/topic'"
        )
    if not (tenant and namespace and local):
        raise BadRequestError(f"bad topic name {name!r}: a name has no empty parts")
    partition = None
    m = _PARTITION.match(local)
    if m:
        local, partition = m.group(1), int(m.group(2))
    return PulsarTopic(domain, tenant, namespace, local, partition)


def check_served(topic: PulsarTopic) -> PulsarTopic:
    if topic.domain == NON_PERSISTENT:
        raise NotServedError(
            f"non-persistent topics are not served by weir yet: use persistent://{topic.tenant}/"
            f"{topic.namespace}/{topic.local}"
        )
    return topic
