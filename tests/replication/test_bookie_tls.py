"""Bookies with mutual TLS: only clients holding a certificate of the cluster's CA reach them;
a plain, unknown or certificate-less client gets a clear error and stores nothing."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tests.security.certs import Authority, Issued
from weir.replication.errors import BookieUnavailableError, NoSuchLedgerError
from weir.replication.ledger import LedgerClient
from weir.replication.ledger.bookie_client import BookieClient
from weir.replication.local_cluster import BookieProcess
from weir.replication.tls import BookieTls
from weir.replication.zkserver import ZooKeeperServer

from .test_cli import weir


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki"), "weir bookie CA")


@pytest.fixture(scope="module")
def shared_bookie_args(ca: Authority) -> tuple[str, ...]:
    """The module's `shared_bookies` (tests/replication/conftest.py) speak mutual TLS only."""
    server = ca.issue("bookie", server=True)
    return ("--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(ca.path))


def client_tls(ca: Authority, issued: Issued) -> BookieTls:
    return BookieTls(ca.path, issued.cert, issued.key)


async def test_only_clients_with_a_certificate_of_the_ca_reach_tls_bookies(
    zookeeper: ZooKeeperServer,
    shared_root: str,
    shared_bookies: list[BookieProcess],
    ca: Authority,
    tmp_path: Path,
) -> None:
    good = client_tls(ca, ca.issue("ledger-client", server=False))
    async with LedgerClient(zookeeper.hosts, root=shared_root, tls=good) as client:
        lh = await client.create_ledger(3, 3, 2)
        for i in range(20):
            await lh.add(b"secret %d" % i)
        await lh.close()
        rh = await client.open_ledger(lh.ledger_id)
        assert await rh.read_range(0, 19) == [b"secret %d" % i for i in range(20)]

    rogue_ca = Authority(tmp_path / "rogue", "rogue CA")
    rogue = rogue_ca.issue("intruder", server=False)
    rogue_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    rogue_ctx.load_verify_locations(cafile=str(ca.path))  # trusts the bookies, unknown to them
    rogue_ctx.load_cert_chain(str(rogue.cert), str(rogue.key))
    no_cert = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    no_cert.load_verify_locations(cafile=str(ca.path))
    refused = {"plain TCP": None, "a rogue CA's certificate": rogue_ctx, "no certificate": no_cert}
    victim = lh.ledger_id + 100
    for ctx in refused.values():
        for b in shared_bookies:
            intruder = BookieClient(b.address, tls=ctx, request_timeout=10)
            try:
                with pytest.raises(BookieUnavailableError, match=b.address):
                    await intruder.add(victim, 0, -1, b"forged")
                with pytest.raises(BookieUnavailableError, match=b.address):
                    await intruder.read_lac(lh.ledger_id, fence=True)
            finally:
                await intruder.close()

    # a client that does not trust the CA refuses the bookies in turn (it verifies them)
    stranger = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    stranger.load_verify_locations(cafile=str(rogue_ca.path))
    bc = BookieClient(shared_bookies[0].address, tls=stranger)
    try:
        with pytest.raises(BookieUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            await bc.read(lh.ledger_id, 0)
    finally:
        await bc.close()

    async with LedgerClient(zookeeper.hosts, root=shared_root, tls=good) as client:
        rh = await client.open_ledger(lh.ledger_id)
        assert rh.closed and rh.last_add_confirmed == 19  # not fenced again, not changed
        for b in shared_bookies:
            bc = client.pool.get(b.address)
            with pytest.raises(NoSuchLedgerError):
                await bc.read(victim, 0)  # the forged add stored nothing


def test_tls_options_come_together_and_bad_files_are_a_clear_error(tmp_path: Path) -> None:
    from weir.errors import BadRequestError
    from weir.replication.bookie.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--data-dir", "d", "--zk", "z", "--tls-cert", "c.pem"])
    missing = BookieTls(tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key")
    with pytest.raises(BadRequestError, match="bookie TLS files"):
        missing.client_context()


async def test_operator_commands_reach_tls_bookies_with_the_env_files(
    zookeeper: ZooKeeperServer, shared_root: str, shared_bookies: list[BookieProcess], ca: Authority
) -> None:
    operator = ca.issue("operator", server=False)
    good = client_tls(ca, ca.issue("writer", server=False))
    async with LedgerClient(zookeeper.hosts, root=shared_root, tls=good) as client:
        lh = await client.create_ledger(3, 3, 2)
        for i in range(5):
            await lh.add(b"%d" % i)
    zk = ["--zk", zookeeper.hosts, "--zk-root", shared_root]
    env = {
        "WEIR_BOOKIE_TLS_CA": str(ca.path),
        "WEIR_BOOKIE_TLS_CERT": str(operator.cert),
        "WEIR_BOOKIE_TLS_KEY": str(operator.key),
    }
    half = weir("ledger", "recover", str(lh.ledger_id), *zk, env={"WEIR_BOOKIE_TLS_CA": "x"})
    assert half.returncode == 1
    assert "needs all of WEIR_BOOKIE_TLS_CA" in half.stderr
    out = weir("ledger", "recover", str(lh.ledger_id), *zk, env=env)
    assert out.returncode == 0, out.stderr
    assert f"ledger {lh.ledger_id}: CLOSED, E=3 WQ=3 AQ=2, last entry 4" in out.stdout
