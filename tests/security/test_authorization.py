"""Every grant kind allows exactly what it names: operations x topics x principals, on a real
server with anonymous access off, through the weir SDK (native front) and the ydb SDK.

Principals: ``pat`` may produce to ``az_p_*``, ``cole`` consume ``az_c_*``, ``ada`` administer
``az_a_*``, ``eve`` produce and consume ``az_x`` exactly, ``nobody`` has no grant, and every
principal (``*``) may consume ``az_pub``; ``root`` is a superuser. A refusal is a
PermissionDeniedError naming the operation and the topic, the same for a topic that
exists and one that does not, and it changes nothing.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator

import pytest
import ydb

import weir
from tests.cli.conftest import Weir, one_line_error
from tests.conftest import ServerProcess
from tests.security.conftest import ROOT, ROOT_PW, root, superuser_server
from tests.ydb.conftest import DATABASE
from weir.errors import PermissionDeniedError, UnauthorizedError, UnknownTopicError

PASSWORD = "grant-test-password"
GRANTS = {
    "pat": [("produce", "az_p_*")],
    "cole": [("consume", "az_c_*")],
    "ada": [("admin", "az_a_*")],
    "eve": [("produce", "az_x"), ("consume", "az_x")],
    "nobody": [],
}
EVERYONE = [("consume", "az_pub")]
TOPICS = ["az_p_1", "az_c_1", "az_a_1", "az_x", "az_pub", "az_other"]


def granted(principal: str, topic: str) -> set[str]:
    """The permissions the table above gives ``principal`` on ``topic``."""
    out = set()
    for permission, pattern in GRANTS[principal] + EVERYONE:
        if pattern == topic or (pattern.endswith("*") and topic.startswith(pattern[:-1])):
            out.add(permission)
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = superuser_server(tmp_path_factory, "authz-server")
    with root(srv) as r:
        for name, grants in GRANTS.items():
            r.add_user(name, PASSWORD)
            for permission, pattern in grants:
                assert r.grant(name, permission, pattern)
        for permission, pattern in EVERYONE:
            r.grant("*", permission, pattern)
        for t in TOPICS:
            r.create_topic(t, partitions=1, consumers=["c"])
            with r.writer(t, producer_id="seed") as w:
                w.write(b"seed")
    yield srv
    srv.stop()


def fresh(srv: ServerProcess, name: str) -> None:
    """A topic of ``name`` that exists with one message (made by root)."""
    with root(srv) as r:
        if name not in [t.name for t in r.list_topics(prefix=name)]:
            r.create_topic(name, partitions=1, consumers=["c"])
            with r.writer(name, producer_id="seed") as w:
                w.write(b"seed")


def write(c: weir.Client, topic: str) -> None:
    with c.writer(topic, producer_id="w") as w:
        w.write(b"x")
        w.flush(timeout=20)


def read(c: weir.Client, topic: str) -> None:
    # a consumer of its own (made on first use), so the seed message is there to read: "c"
    # may have committed everything already, and the read would wait out its timeout
    with c.reader(topic, consumer=f"r{uuid.uuid4().hex[:8]}") as r:
        assert r.receive_batch(timeout=20) is not None


# operation -> (the permission it needs, None: any grant; the word the error uses; the call)
OPERATIONS: dict[str, tuple[str | None, str, Callable[[weir.Client, str], object]]] = {
    "describe": (None, "describe", lambda c, t: c.describe_topic(t)),
    "write": ("produce", "write to", write),
    "read": ("consume", "read", read),
    "read_range": ("consume", "read", lambda c, t: list(c.read_range(t, 0, 0, 1))),
    "commit": ("consume", "commit an offset of", lambda c, t: c.commit_offset(t, 0, "c", 1)),
    "describe_consumer": (
        "consume",
        "describe a consumer of",
        lambda c, t: c.describe_consumer(t, "c"),
    ),
    "offsets_for_time": (
        "consume",
        "look up offsets by time in",
        lambda c, t: c.offsets_for_time(t, 0),
    ),
    "alter": ("admin", "alter", lambda c, t: c.alter_topic(t, retention=dt.timedelta(hours=5))),
    "create": ("admin", "create", lambda c, t: c.create_topic(t + "_new")),
    "drop": ("admin", "drop", lambda c, t: c.drop_topic(t + "_drop")),
}


@pytest.mark.parametrize("principal", sorted(GRANTS))
def test_each_grant_allows_exactly_what_it_names(server: ServerProcess, principal: str) -> None:
    outcomes: dict[tuple[str, str], str] = {}
    with weir.Client(server.endpoint, credentials=(principal, PASSWORD)) as c:
        for topic in TOPICS:
            held = granted(principal, topic)
            for op, (needs, word, call) in OPERATIONS.items():
                target = topic + {"create": "_new", "drop": "_drop"}.get(op, "")
                if op == "drop":
                    fresh(server, target)
                allowed = bool(held) if needs is None else needs in held
                try:
                    call(c, topic)
                except PermissionDeniedError as err:
                    outcomes[(topic, op)] = "denied"
                    assert f"permission denied: {word} topic {target!r}" in err.message, err
                    assert principal in err.message
                else:
                    outcomes[(topic, op)] = "allowed"
                assert outcomes[(topic, op)] == ("allowed" if allowed else "denied"), (
                    principal,
                    topic,
                    op,
                )
                if op == "create" and allowed:
                    with root(server) as r:
                        r.drop_topic(target)
        # a listing shows the topics with a grant, and only those
        visible = {t.name for t in c.list_topics(prefix="az_")}
        with root(server) as r:
            every = {t.name for t in r.list_topics(prefix="az_")}
        assert visible == {t for t in every if granted(principal, t)}, visible
        assert visible >= {t for t in TOPICS if granted(principal, t)}
    with root(server) as r:  # the refused drops left their topics in place, with their data
        for topic in TOPICS:
            if "admin" not in granted(principal, topic):
                assert r.describe_topic(topic + "_drop").messages == 1
                r.drop_topic(topic + "_drop")


def test_a_refusal_says_the_same_for_a_topic_that_does_not_exist(server: ServerProcess) -> None:
    with weir.Client(server.endpoint, credentials=("cole", PASSWORD)) as c:
        with pytest.raises(PermissionDeniedError) as there:
            c.describe_topic("az_other")
        with pytest.raises(PermissionDeniedError) as missing:
            c.describe_topic("az_other_missing")
        assert there.value.message.replace("az_other", "T") == missing.value.message.replace(
            "az_other_missing", "T"
        )
        # within its grants, a missing topic is just missing
        with pytest.raises(UnknownTopicError):
            c.describe_topic("az_c_missing")


def test_superusers_do_everything_and_anonymous_nothing(server: ServerProcess) -> None:
    with root(server) as r:
        assert r.whoami().superuser
        for topic in ("az_other", "az_x"):
            r.describe_topic(topic)
            write(r, topic)
        assert {t.name for t in r.list_topics(prefix="az_")} >= set(TOPICS)
    with weir.Client(server.endpoint) as anon, pytest.raises(UnauthorizedError):
        anon.describe_topic("az_pub")


def test_grants_and_revokes_take_effect_at_once(server: ServerProcess) -> None:
    fresh(server, "az_late")
    with weir.Client(server.endpoint, credentials=("nobody", PASSWORD)) as c, root(server) as r:
        with pytest.raises(PermissionDeniedError):
            write(c, "az_late")
        assert r.grant("nobody", "produce", "az_late")
        assert not r.grant("nobody", "produce", "az_late")  # already there
        write(c, "az_late")
        assert [g.resource for g in c.list_grants("nobody")] == ["az_late"]
        assert r.revoke("nobody", "produce", "az_late")
        assert not r.revoke("nobody", "produce", "az_late")
        with pytest.raises(PermissionDeniedError):
            write(c, "az_late")
        with pytest.raises(PermissionDeniedError, match="listing the grants of others needs"):
            c.list_grants("pat")
        with pytest.raises(weir.errors.BadRequestError, match="unknown permission"):
            r.grant("nobody", "write", "az_late")


def test_the_cli_grants_revokes_and_lists(server: ServerProcess) -> None:
    cli = Weir(server.endpoint)
    env = {"WEIR_USER": ROOT, "WEIR_PASSWORD": ROOT_PW}
    r = cli("grant", "nobody", "consume", "shop/*", env=env)
    assert (r.code, r.text) == (0, "granted consume on shop/* to nobody\n"), r.err
    r = cli("grants", "nobody", "--json", env=env)
    assert r.json() == [{"principal": "nobody", "permission": "consume", "resource": "shop/*"}]
    r = cli("revoke", "nobody", "consume", "shop/*", env=env)
    assert (r.code, r.text) == (0, "revoked consume on shop/* from nobody\n"), r.err
    r = cli("grant", "nobody", "admin", "*", env={"WEIR_USER": "pat", "WEIR_PASSWORD": PASSWORD})
    assert r.code == 1
    assert one_line_error(r) == (
        "error: permission denied: granting a permission needs a superuser ('pat' is not one)"
    )


# ---------------------------------------------------------------------------- the ydb SDK


def ydb_driver(srv: ServerProcess, user: str) -> ydb.Driver:
    driver = ydb.Driver(
        endpoint=f"grpc://{srv.endpoint}",
        database=DATABASE,
        credentials=ydb.StaticCredentials.from_user_password(user, PASSWORD),
    )
    driver.wait(timeout=15, fail_fast=True)
    return driver


def ydb_write(d: ydb.Driver, path: str) -> None:
    with d.topic_client.writer(path, producer_id="y") as w:
        w.write_with_ack(ydb.TopicWriterMessage(b"y"))


def ydb_read(d: ydb.Driver, path: str) -> None:
    # a consumer of its own (made on first use): "c" may have committed everything already
    with d.topic_client.reader(path, consumer=f"y{uuid.uuid4().hex[:8]}") as r:
        r.receive_batch(timeout=20)


YDB_OPERATIONS: dict[str, tuple[str | None, Callable[[ydb.Driver, str], object]]] = {
    "describe": (None, lambda d, p: d.topic_client.describe_topic(p)),
    "write": ("produce", ydb_write),
    "read": ("consume", ydb_read),
    "commit": ("consume", lambda d, p: d.topic_client.commit_offset(p, "c", 0, 1)),
    "alter": (
        "admin",
        lambda d, p: d.topic_client.alter_topic(p, set_retention_period=dt.timedelta(hours=6)),
    ),
}


@pytest.mark.parametrize("principal", ["pat", "cole", "eve"])
def test_the_ydb_front_applies_the_same_grants(server: ServerProcess, principal: str) -> None:
    driver = ydb_driver(server, principal)
    try:
        for topic in ("az_p_1", "az_c_1", "az_x", "az_other"):
            held = granted(principal, topic)
            path = f"{DATABASE}/{topic}"
            for op, (needs, call) in YDB_OPERATIONS.items():
                allowed = bool(held) if needs is None else needs in held
                try:
                    call(driver, path)
                except ydb.issues.Unauthorized as err:
                    assert not allowed, (principal, topic, op, err)
                    assert "permission denied" in str(err) and topic in str(err), err
                else:
                    assert allowed, (principal, topic, op)
    finally:
        driver.stop(timeout=5)


def test_subscriptions_need_consume_and_tenancy_needs_a_grant(server: ServerProcess) -> None:
    """The calls that came with subscriptions and namespaces are checked like the rest: a
    subscription needs the consume permission on its topic (creating, listing, seeking,
    consuming), and tenants and namespaces need a grant on them (a namespace lists its topics
    and its policies reach every topic in it)."""
    with weir.Client(server.endpoint, credentials=("pat", PASSWORD)) as pat:
        with pytest.raises(PermissionDeniedError, match="az_p_1"):
            pat.create_subscription("az_p_1", "s", type="shared")
        with pytest.raises(PermissionDeniedError, match="az_p_1"):
            pat.list_subscriptions("az_p_1")
        with pytest.raises(PermissionDeniedError, match="skip messages"):
            pat.skip_subscription("az_p_1", "s")
        consumer = pat.subscribe("az_p_1", "s", type="shared", initial_position="earliest")
        try:
            with pytest.raises(PermissionDeniedError, match="subscribe to"):
                consumer.receive(timeout=30)
        finally:
            consumer.close()
        with pytest.raises(PermissionDeniedError, match="namespace 'public/pats'"):
            pat.create_namespace("public/pats")
        assert (
            pat.list_namespaces() == []
        )  # it may describe none (tests/security/test_tenant_grants.py)
    with weir.Client(server.endpoint, credentials=("cole", PASSWORD)) as cole:
        cole.create_subscription("az_c_1", "s", type="shared", initial_position="earliest")
        # the topic's consumers (other tests' readers) are listed too, as such
        assert [s.name for s in cole.list_subscriptions("az_c_1") if not s.consumer] == ["s"]
        with cole.subscribe("az_c_1", "s", type="shared") as consumer:
            msg = consumer.receive(timeout=30)
            assert msg is not None and msg.data == b"seed"
            consumer.acknowledge(msg)
    with root(server) as r:
        assert "public/pats" not in [n.name for n in r.list_namespaces()]
        r.create_namespace("public/roots")
