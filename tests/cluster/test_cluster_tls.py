"""A cluster whose brokers serve TLS (`tls.cert_file`) and require client certificates
(`tls.client_ca_file`): when the Kafka group coordinator is not the partition's owner, it
asks the owner for the group's offsets over TLS, checking the owner's certificate with
`tls.peer_ca_file` and presenting its own. Two `weir serve` processes of one cluster (real
ZooKeeper, the module's real bookies), kafka-python over SSL with a client certificate."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import OffsetAndMetadata, TopicPartition

import weir
from tests.cluster.claims import in_zk, owner_of
from tests.cluster.kafka_members import group_member
from tests.conftest import ServerProcess, cluster_servers
from tests.security.certs import Authority
from weir.broker.cluster import partition_key
from weir.protocols.kafka.cluster_view import coordinator_of
from weir.replication.local_cluster import BookieProcess
from weir.replication.zkserver import ZooKeeperServer

NAMES = ("a", "b")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("cluster-pki"))


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    tmp_path_factory: pytest.TempPathFactory,
    pki: Authority,
) -> Iterator[dict[str, ServerProcess]]:
    # for 127.0.0.1 too (the endpoints the brokers publish), and a client's: the brokers'
    # calls to each other present it
    cert = pki.issue("localhost", client_too=True)
    env = {
        "WEIR_TLS_CERT_FILE": str(cert.cert),
        "WEIR_TLS_KEY_FILE": str(cert.key),
        "WEIR_TLS_PEER_CA_FILE": str(pki.path),
        "WEIR_TLS_CLIENT_CA_FILE": str(pki.path),
    }
    with cluster_servers(NAMES, zookeeper.hosts, shared_root, tmp_path_factory, "tls", env) as out:
        yield out


def test_a_kafka_group_commits_through_a_coordinator_that_reaches_the_owner_over_tls(
    brokers: dict[str, ServerProcess], zookeeper: ZooKeeperServer, shared_root: str, pki: Authority
) -> None:
    name, kname = "public/default/tls-group", "tls-group"
    me = pki.issue("tester", server=False)
    tls = weir.Tls(ca=pki.path, cert=me.cert, key=me.key)
    with weir.Client(brokers["a"].endpoint, tls=tls) as c:
        c.create_topic(name, partitions=1, consumers=["c"])
    owner = in_zk(zookeeper, shared_root, lambda r: owner_of(r, partition_key(name, 0)))
    group = next(g for g in (f"tg{i}" for i in range(64)) if coordinator_of(g, NAMES) != owner)
    with weir.Client(brokers[owner].endpoint, tls=tls) as c, c.writer(name, producer_id="w") as w:
        for i in range(40):
            w.write(b"m%d" % i)
    tp = TopicPartition(kname, 0)

    member = group_member(
        brokers[owner],
        group,
        tp,
        security_protocol="SSL",
        ssl_cafile=str(pki.path),
        ssl_certfile=str(me.cert),
        ssl_keyfile=str(me.key),
    )
    try:
        member.commit({tp: OffsetAndMetadata(30, "", -1)})  # the coordinator commits at the owner
        assert member.committed(tp) == 30  # and reads it back from there
    finally:
        member.close()
    with weir.Client(brokers[owner].endpoint, tls=tls) as c:
        [part] = c.describe_consumer(name, group).partitions
        assert part.committed_offset == 30
