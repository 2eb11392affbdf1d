"""Pulsar topic names as weir names: ``persistent://tenant/namespace/topic[-partition-N]``.

Pulsar's short forms mean what they mean there: ``orders`` is
``persistent://public/default/orders``, ``tenant/namespace/orders`` the same domain.
A weir topic of one partition is a *non-partitioned* Pulsar topic; a topic of N > 1
partitions is a partitioned one, its partitions named ``<topic>-partition-<i>``.
``non-persistent://x`` names the weir topic ``x`` of kind non-persistent (see
docs/topics.md): weir keeps one topic per name, so a name whose domain is not the
topic's kind is refused (`check_kind`) rather than reaching the other topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from weir.broker.topics import NON_PERSISTENT as NON_PERSISTENT_KIND
from weir.broker.topics import TopicConfig, short_topic
from weir.errors import BadRequestError

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
_PARTITION = re.compile(r"^(.+)-partition-(\d{1,6})$")


class NotServedError(BadRequestError):
    """A Pulsar feature weir does not serve (yet): answered with NotAllowedError."""

    code = "NOT_SERVED"


class InvalidTopicNameError(BadRequestError):
    """A name that is not a Pulsar topic name: answered with NotAllowedError (see
    `errors.server_error`)."""

    code = "INVALID_TOPIC_NAME"


class TopicKindError(BadRequestError):
    """``persistent://x`` for a non-persistent topic ``x``, or the reverse: answered with
    NotAllowedError (the topic of the other kind is left as it is)."""

    code = "WRONG_TOPIC_KIND"


@dataclass(frozen=True, slots=True)
class PulsarTopic:
    domain: str
    tenant: str
    namespace: str
    local: str  # without the partition suffix
    partition: int | None  # None: the topic itself (all of it, or its only partition)

    @property
    def kind(self) -> str:
        """The weir topic kind this name asks for (`weir.broker.topics`)."""
        return self.domain  # the same words: "persistent", "non-persistent"

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
        raise InvalidTopicNameError(f"bad topic name {name!r}")
    domain = PERSISTENT
    rest = name
    if "://" in name:
        domain, _, rest = name.partition("://")
        if domain not in (PERSISTENT, NON_PERSISTENT):
            raise InvalidTopicNameError(
                f"bad topic name {name!r}: the domain is persistent:// or non-persistent://"
            )
    parts = rest.split("/")
    if len(parts) == 1 and "://" not in name:
        tenant, namespace, local = "public", "default", parts[0]
    elif len(parts) == 3:
        tenant, namespace, local = parts
    elif len(parts) == 4:  # the old form with a cluster: tenant/cluster/namespace/topic
        raise InvalidTopicNameError(
            f"topic name {name!r} names a cluster: use tenant/namespace/topic"
        )
    else:
        raise InvalidTopicNameError(
            f"bad topic name {name!r}: use 'topic' or 'persistent://tenant/namespace/topic'"
        )
    if not (tenant and namespace and local):
        raise InvalidTopicNameError(f"bad topic name {name!r}: a name has no empty parts")
    partition = None
    m = _PARTITION.match(local)
    if m:
        local, partition = m.group(1), int(m.group(2))
    return PulsarTopic(domain, tenant, namespace, local, partition)


def check_kind(topic: PulsarTopic, cfg: TopicConfig) -> TopicConfig:
    """``cfg`` when its kind is the one ``topic``'s domain names, else TopicKindError."""
    if cfg.kind != topic.kind:
        other = "non-persistent" if cfg.kind == NON_PERSISTENT_KIND else "persistent"
        raise TopicKindError(
            f"{topic.url(topic.partition)} names a {topic.domain} topic, but weir's topic "
            f"{short_topic(cfg.name)!r} is {other} (weir keeps one topic per name): use "
            f"{other}://{topic.tenant}/{topic.namespace}/{topic.local}"
        )
    return cfg
