"""Consume grants on consumer groups (``group:NAME``): operations x fronts x principals x
group names, on a real server with anonymous access off, through the clients of each front
(weir SDK, ydb SDK, pulsar-client and the admin REST, kafka-python).

Principals: ``gina`` may consume the topic and use the groups ``gina-*`` only (she has a
group grant, so her group names are limited); ``hugo`` may consume the topic and has no
group grant (the default rule: any group name, as before group grants existed); ``gus`` may
use every group (``group:*``) but has no grant on the topic, and a group grant gives
nothing on topics. A refusal is the front's own permission error, naming the operation and
the group (or the topic), and it reads nothing, creates no consumer and moves no offset.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pulsar
import pytest
import ydb
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import (
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from kafka.structs import OffsetAndMetadata

import weir
from tests.conftest import ServerProcess
from tests.pulsar.conftest import quiet
from tests.security.conftest import root, superuser_server
from tests.ydb.conftest import DATABASE
from weir.errors import PermissionDeniedError, UnknownConsumerError

PASSWORD = "group-grant-password"
TOPIC = "gg_t"
GRANTS = {
    "gina": [("consume", TOPIC), ("consume", "group:gina-*")],
    "hugo": [("consume", TOPIC)],
    "gus": [("consume", "group:*")],
}
PREFIXES = ["gina", "other"]  # the groups each operation is tried under: gina-..., other-...


def allowed(principal: str, prefix: str) -> tuple[bool, bool]:
    """(the topic is allowed, the group is allowed) by the table above."""
    topic_ok = any(r == TOPIC for _, r in GRANTS[principal])
    groups = [r[len("group:") :] for _, r in GRANTS[principal] if r.startswith("group:")]
    group_ok = not groups or any(g == "*" or prefix + "-" == g[:-1] for g in groups)
    return topic_ok, group_ok


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = superuser_server(tmp_path_factory, "group-grants")
    with root(srv) as r:
        for name, grants in GRANTS.items():
            r.add_user(name, PASSWORD)
            for permission, resource in grants:
                assert r.grant(name, permission, resource)
        r.create_topic(TOPIC, partitions=1)
        with r.writer(TOPIC, producer_id="seed") as w:
            w.write(b"one")
            w.write(b"two")
    yield srv
    srv.stop()


def consumers(srv: ServerProcess) -> set[str]:
    with root(srv) as r:
        return {c.name for c in r.describe_topic(TOPIC).consumers}


# ---------------------------------------------------------------------------- operations

Op = Callable[[ServerProcess, str, str], None]  # (server, principal, group)


def native_read(srv: ServerProcess, who: str, group: str) -> None:
    with (
        weir.Client(srv.endpoint, credentials=(who, PASSWORD)) as c,
        c.reader(TOPIC, consumer=group, start="earliest") as r,
    ):
        assert r.receive_batch(timeout=20) is not None


def native_commit(srv: ServerProcess, who: str, group: str) -> None:
    with weir.Client(srv.endpoint, credentials=(who, PASSWORD)) as c:
        c.commit_offset(TOPIC, 0, group, 1)


def native_describe(srv: ServerProcess, who: str, group: str) -> None:
    with (
        weir.Client(srv.endpoint, credentials=(who, PASSWORD)) as c,
        contextlib.suppress(UnknownConsumerError),  # allowed, and there is no such consumer
    ):
        c.describe_consumer(TOPIC, group)


def native_subscribe(srv: ServerProcess, who: str, group: str) -> None:
    with (
        weir.Client(srv.endpoint, credentials=(who, PASSWORD)) as c,
        c.subscribe(TOPIC, group, type="shared", initial_position="earliest") as sub,
    ):
        msg = sub.receive(timeout=30)
        assert msg is not None
        sub.acknowledge(msg)


def native_create_subscription(srv: ServerProcess, who: str, group: str) -> None:
    with weir.Client(srv.endpoint, credentials=(who, PASSWORD)) as c:
        c.create_subscription(TOPIC, group, type="shared")


def _ydb(srv: ServerProcess, who: str) -> ydb.Driver:
    driver = ydb.Driver(
        endpoint=f"grpc://{srv.endpoint}",
        database=DATABASE,
        credentials=ydb.StaticCredentials.from_user_password(who, PASSWORD),
    )
    driver.wait(timeout=15, fail_fast=True)
    return driver


def ydb_read(srv: ServerProcess, who: str, group: str) -> None:
    driver = _ydb(srv, who)
    try:
        with driver.topic_client.reader(f"{DATABASE}/{TOPIC}", consumer=group) as r:
            assert r.receive_batch(timeout=20) is not None
    finally:
        driver.stop(timeout=5)


def ydb_commit(srv: ServerProcess, who: str, group: str) -> None:
    driver = _ydb(srv, who)
    try:
        driver.topic_client.commit_offset(f"{DATABASE}/{TOPIC}", group, 0, 1)
    finally:
        driver.stop(timeout=5)


def pulsar_subscribe(srv: ServerProcess, who: str, group: str) -> None:
    client = pulsar.Client(
        srv.pulsar_url,
        authentication=pulsar.AuthenticationBasic(who, PASSWORD),
        operation_timeout_seconds=10,
        logger=quiet(),
    )
    try:
        consumer = client.subscribe(TOPIC, group, initial_position=pulsar.InitialPosition.Earliest)
        consumer.acknowledge(consumer.receive(10_000))
        consumer.close()
    finally:
        client.close()


def rest_create_subscription(srv: ServerProcess, who: str, group: str) -> None:
    url = f"{srv.http_url}/admin/v2/persistent/public/default/{TOPIC}/subscription/{group}"
    out = subprocess.run(
        ["curl", "-sS", "-X", "PUT", "-u", f"{who}:{PASSWORD}", "-w", "\n%{http_code}", url],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    body, _, code = out.rpartition("\n")
    if code == "403":
        raise PermissionDeniedError(body)
    assert code in ("200", "204"), out


def _kafka(srv: ServerProcess, who: str, group: str, **extra: object) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=srv.kafka,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=who,
        sasl_plain_password=PASSWORD,
        group_id=group,
        enable_auto_commit=False,
        **extra,
    )


def kafka_join(srv: ServerProcess, who: str, group: str) -> None:
    c = _kafka(srv, who, group, auto_offset_reset="earliest")
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        got: dict = {}
        while not got and time.monotonic() < deadline:
            got = c.poll(timeout_ms=500)
        assert got, "nothing read"
    finally:
        c.close()


def kafka_commit(srv: ServerProcess, who: str, group: str) -> None:
    c = _kafka(srv, who, group)
    try:
        tp = TopicPartition(TOPIC, 0)
        c.assign([tp])
        c.commit({tp: OffsetAndMetadata(1, "", -1)})
    finally:
        c.close(autocommit=False)


def kafka_fetch(srv: ServerProcess, who: str, group: str) -> None:
    c = _kafka(srv, who, group)
    try:
        c.committed(TopicPartition(TOPIC, 0))
    finally:
        c.close(autocommit=False)


def _admin(srv: ServerProcess, who: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=srv.kafka,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=who,
        sasl_plain_password=PASSWORD,
    )


def kafka_describe(srv: ServerProcess, who: str, group: str) -> None:
    admin = _admin(srv, who)
    try:
        error = admin.describe_groups([group])[group]["error"]  # kafka-python: not raised
    finally:
        admin.close()
    if error is not None:
        assert "GroupAuthorizationFailedError" in error, error
        raise GroupAuthorizationFailedError(error)


def kafka_delete(srv: ServerProcess, who: str, group: str) -> None:
    admin = _admin(srv, who)
    try:
        error = admin.delete_groups([group])[group]  # kafka-python: an error's name, or OK
    finally:
        admin.close()
    if error == "GroupAuthorizationFailedError":
        raise GroupAuthorizationFailedError(error)
    assert error in ("OK", "GroupIdNotFoundError"), error


KAFKA_REFUSED = (GroupAuthorizationFailedError, TopicAuthorizationFailedError)


class Operation(NamedTuple):
    call: Op
    word: str  # the operation as the refusal names it ("": the client shows no text)
    refused: type[BaseException] | tuple[type[BaseException], ...]  # the front's error
    needs_topic: bool = True  # whether it needs consume on the topic too
    group_first: bool = False  # whether the group is checked before the topic


OPERATIONS: dict[str, Operation] = {
    "native_read": Operation(native_read, "read", PermissionDeniedError),
    "native_commit": Operation(native_commit, "commit an offset of", PermissionDeniedError),
    "native_describe": Operation(native_describe, "describe a consumer of", PermissionDeniedError),
    "native_subscribe": Operation(native_subscribe, "subscribe to", PermissionDeniedError),
    "native_create_subscription": Operation(
        native_create_subscription, "create a subscription on", PermissionDeniedError
    ),
    "ydb_read": Operation(ydb_read, "read", ydb.issues.Unauthorized),
    "ydb_commit": Operation(ydb_commit, "commit an offset of", ydb.issues.Unauthorized),
    # pulsar-client names the server's error by its kind only
    "pulsar_subscribe": Operation(pulsar_subscribe, "", pulsar.AuthorizationError),
    "rest_create_subscription": Operation(
        rest_create_subscription, "create a subscription on", PermissionDeniedError
    ),
    # Kafka checks the group first (GROUP_AUTHORIZATION_FAILED), then the topics; kafka-python
    # shows the error code, not the server's text
    "kafka_join": Operation(kafka_join, "", KAFKA_REFUSED, group_first=True),
    "kafka_commit": Operation(kafka_commit, "", KAFKA_REFUSED, group_first=True),
    "kafka_fetch": Operation(kafka_fetch, "", KAFKA_REFUSED, group_first=True),
    "kafka_describe": Operation(
        kafka_describe, "", KAFKA_REFUSED, needs_topic=False, group_first=True
    ),
    "kafka_delete": Operation(kafka_delete, "", KAFKA_REFUSED, needs_topic=False, group_first=True),
}


@pytest.mark.parametrize("principal", sorted(GRANTS))
def test_group_grants_limit_the_groups_a_principal_consumes_under(
    server: ServerProcess, principal: str
) -> None:
    outcomes: dict[tuple[str, str], str] = {}
    refused: list[str] = []
    for prefix in PREFIXES:
        topic_ok, group_ok = allowed(principal, prefix)
        for op, o in OPERATIONS.items():
            group = f"{prefix}-{op.replace('_', '-')}-{principal}"
            expect = group_ok and (topic_ok or not o.needs_topic)
            try:
                o.call(server, principal, group)
            except o.refused as err:
                outcomes[(prefix, op)] = "denied"
                refused.append(group)
                text = str(err).replace("\\'", "'")  # the ydb SDK escapes quotes
                by_group = not group_ok and (o.group_first or topic_ok)
                if isinstance(err, KAFKA_REFUSED):
                    kind = GroupAuthorizationFailedError if by_group else KAFKA_REFUSED
                    assert isinstance(err, kind), (op, err)
                elif not o.word:
                    pass
                elif by_group:
                    assert f"permission denied: {o.word} group '{group}'" in text, text
                    assert f"group:{group}" in text and principal in text, text
                else:
                    assert f"permission denied: {o.word} topic '{TOPIC}'" in text, text
            else:
                outcomes[(prefix, op)] = "allowed"
            assert outcomes[(prefix, op)] == ("allowed" if expect else "denied"), (
                principal,
                prefix,
                op,
            )
    # a refused consumer made no consumer or subscription, so it has no offset to move
    assert not set(refused) & consumers(server), set(refused) & consumers(server)
    with root(server) as r:
        subs = {s.name for s in r.list_subscriptions(TOPIC)}
    assert not set(refused) & subs


def test_kafka_lists_only_the_groups_a_principal_may_use(server: ServerProcess) -> None:
    with root(server) as r:
        r.commit_offset(TOPIC, 0, "gina-listed", 1)
        r.commit_offset(TOPIC, 0, "other-listed", 1)
    for who, expect in (("gina", {"gina-listed"}), ("hugo", {"gina-listed", "other-listed"})):
        admin = _admin(server, who)
        try:
            listed = {g["group_id"] for g in admin.list_groups()}
        finally:
            admin.close()
        assert listed & {"gina-listed", "other-listed"} == expect, (who, listed)


def test_a_refused_kafka_commit_moves_no_offset(server: ServerProcess) -> None:
    with root(server) as r:
        r.commit_offset(TOPIC, 0, "other-kept", 1)
    with pytest.raises(GroupAuthorizationFailedError):
        kafka_commit(server, "gina", "other-kept")  # would move it to 1 again: use 2
    c = _kafka(server, "gina", "other-kept")
    try:
        tp = TopicPartition(TOPIC, 0)
        c.assign([tp])
        with pytest.raises(GroupAuthorizationFailedError):
            c.commit({tp: OffsetAndMetadata(2, "", -1)})
    finally:
        c.close(autocommit=False)
    with root(server) as r:
        [part] = r.describe_consumer(TOPIC, "other-kept").partitions
        assert part.committed_offset == 1


def test_revoking_a_group_grant_ends_the_stream_that_uses_it(server: ServerProcess) -> None:
    with root(server) as r:
        r.add_user("rhea", PASSWORD)
        r.grant("rhea", "consume", TOPIC)
        r.grant("rhea", "consume", "group:rhea-a")
        r.grant("rhea", "consume", "group:rhea-b")
        with (
            weir.Client(server.endpoint, credentials=("rhea", PASSWORD)) as c,
            c.reader(TOPIC, consumer="rhea-a", start="earliest") as reader,
        ):
            assert reader.receive_batch(timeout=20) is not None
            assert r.revoke("rhea", "consume", "group:rhea-a")  # rhea-b remains: limited
            with pytest.raises(PermissionDeniedError, match="read group 'rhea-a'"):
                for _ in range(100):  # bounded: each call waits at most 5 s
                    reader.receive_batch(timeout=5)
