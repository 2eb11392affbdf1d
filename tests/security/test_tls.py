"""TLS on every listener, with real clients: the gRPC port (native and YDB fronts), the HTTP
endpoint (metrics, Pulsar admin REST, console), the Pulsar port and the Kafka port.

A throwaway CA (made with `cryptography`, see tests/security/certs.py) signs the
server's certificate. The weir SDK, the `weir` CLI, the `ydb` SDK and `curl`
connect with the right CA, fail with a clear error with the wrong one, and a
plain-text client, a TLS client to a plain port and garbage bytes are refused
without a hang. Replacing the certificate files (or SIGHUP) changes the
certificate served at the next handshake, with no restart; a bad replacement
keeps the old one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
import ydb

import weir
from tests.cli.conftest import Weir, one_line_error
from tests.conftest import ServerProcess
from tests.security.certs import Authority, Issued, subject_cn
from tests.ydb.conftest import DATABASE
from weir.errors import UnavailableError

METRICS = "--metrics-listen", "127.0.0.1:0"


def tls_env(cert: Issued, client_ca: Path | None = None) -> dict[str, str]:
    env = {"WEIR_TLS_CERT_FILE": str(cert.cert), "WEIR_TLS_KEY_FILE": str(cert.key)}
    if client_ca is not None:
        env["WEIR_TLS_CLIENT_CA_FILE"] = str(client_ca)
    return env


def metrics_port(srv: ServerProcess) -> int:
    line = next(line for line in srv.log if "weir metrics on https://" in line)
    return int(line.rsplit(":", 1)[1].split("/", 1)[0])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("pki")
    ca = Authority(d / "ca")
    other = Authority(d / "other", "other CA")
    return {
        "ca": ca,
        "other": other,
        "server": ca.issue("weir-server", stem="server"),
        "client": ca.issue("bob", server=False),
        "stranger": other.issue("mallory", server=False),
    }


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, object]
) -> Iterator[ServerProcess]:
    cert = pki["server"]
    assert isinstance(cert, Issued)
    srv = ServerProcess(tmp_path_factory.mktemp("tls-server"), *METRICS, env=tls_env(cert))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def mtls_server(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, object]
) -> Iterator[ServerProcess]:
    cert, ca = pki["server"], pki["ca"]
    assert isinstance(cert, Issued) and isinstance(ca, Authority)
    srv = ServerProcess(
        tmp_path_factory.mktemp("mtls-server"), *METRICS, env=tls_env(cert, ca.path)
    )
    srv.start()
    yield srv
    srv.stop()


def ca_of(pki: dict[str, object], name: str = "ca") -> Authority:
    ca = pki[name]
    assert isinstance(ca, Authority)
    return ca


def issued(pki: dict[str, object], name: str) -> Issued:
    cert = pki[name]
    assert isinstance(cert, Issued)
    return cert


def served_cn(port: int, alpn: str = "h2") -> str:
    """The common name of the certificate the port presents (no verification: we look)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols([alpn])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
        assert der is not None
        return subject_cn(der)


# ---------------------------------------------------------------------------- weir SDK


def test_the_sdk_talks_tls_with_the_right_ca(
    tls_server: ServerProcess, pki: dict[str, object], topic_name: str
) -> None:
    with weir.Client(tls_server.endpoint, tls=weir.Tls(ca=ca_of(pki).path)) as c:
        c.create_topic(topic_name, partitions=1)
        with c.writer(topic_name, producer_id="p") as w:
            w.write(b"over tls")
        chunk = next(iter(c.read_range(topic_name, 0, 0, 1)))
        assert chunk.messages()[0].data == b"over tls"
    # the grpcs:// form with the CA as PEM bytes
    with weir.Client(f"grpcs://{tls_server.endpoint}", tls=weir.Tls(ca=ca_of(pki).pem)) as c:
        assert topic_name in [t.name for t in c.list_topics(prefix=topic_name)]


def test_the_sdk_refuses_a_server_signed_by_another_ca(
    tls_server: ServerProcess, pki: dict[str, object]
) -> None:
    with (
        weir.Client(tls_server.endpoint, tls=weir.Tls(ca=ca_of(pki, "other").path)) as c,
        pytest.raises(UnavailableError, match="not signed by the trusted CA"),
    ):
        c.list_topics()
    # grpcs:// alone trusts the system's CAs, which did not sign this test CA's certificate
    with (
        weir.Client(f"grpcs://{tls_server.endpoint}") as c,
        pytest.raises(UnavailableError, match="not signed by the trusted CA"),
    ):
        c.list_topics()


def test_a_plain_text_client_on_a_tls_port_fails_clearly(tls_server: ServerProcess) -> None:
    with (
        weir.Client(tls_server.endpoint) as c,
        pytest.raises(UnavailableError, match="does it speak TLS"),
    ):
        c.list_topics()


def test_a_tls_client_on_a_plain_port_fails_at_once(
    shared_server: ServerProcess, pki: dict[str, object]
) -> None:
    with (
        weir.Client(shared_server.endpoint, tls=weir.Tls(ca=ca_of(pki).path)) as c,
        pytest.raises(UnavailableError, match="server does not speak TLS"),
    ):
        c.list_topics()


def test_the_writer_and_reader_fail_clearly_on_a_tls_mismatch(
    tls_server: ServerProcess, topic_name: str
) -> None:
    """A plain-text client on a TLS port sees its first contact closed before any answer,
    as a client behind a proxy whose server is restarting does: after CLOSED_PATIENCE_S
    (10 s), not at once, it is reported as a likely TLS mismatch."""
    with weir.Client(tls_server.endpoint) as c:
        w = c.writer(topic_name, producer_id="p")
        with pytest.raises(UnavailableError, match="does it speak TLS"):
            w.write(b"x")
            w.flush(timeout=60)
        w.close()  # the error reached the caller already
        with (
            c.reader(topic_name, consumer="c") as r,
            pytest.raises(UnavailableError, match="does it speak TLS"),
        ):
            r.receive_batch(timeout=60)


def test_mtls_serves_a_client_with_a_certificate_of_the_ca(
    mtls_server: ServerProcess, pki: dict[str, object], topic_name: str
) -> None:
    bob = issued(pki, "client")
    tls = weir.Tls(ca=ca_of(pki).path, cert=bob.cert, key=bob.key)
    with weir.Client(mtls_server.endpoint, tls=tls) as c:
        c.create_topic(topic_name)
        assert c.describe_topic(topic_name).name == topic_name


@pytest.mark.parametrize("client", ["none", "stranger"])
def test_mtls_refuses_a_client_without_a_certificate_of_the_ca(
    mtls_server: ServerProcess, pki: dict[str, object], client: str
) -> None:
    tls = weir.Tls(ca=ca_of(pki).path)
    if client == "stranger":
        mallory = issued(pki, "stranger")
        tls = weir.Tls(ca=ca_of(pki).path, cert=mallory.cert, key=mallory.key)
    with weir.Client(mtls_server.endpoint, tls=tls) as c, pytest.raises(UnavailableError) as err:
        c.list_topics()
    assert "TLS handshake" in err.value.message, err.value.message


def test_bad_tls_options_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(weir.errors.BadRequestError, match="needs both cert= and key="):
        weir.Tls(cert=tmp_path / "c.pem")
    with (
        pytest.raises(weir.errors.BadRequestError, match=r"CA file .* does not exist"),
        weir.Client("127.0.0.1:1", tls=weir.Tls(ca=tmp_path / "missing.pem")),
    ):
        pass


# ---------------------------------------------------------------------------- hostile bytes


@pytest.mark.parametrize("port_of", ["grpc", "metrics"])
def test_garbage_bytes_on_a_tls_port_are_dropped_and_the_port_keeps_serving(
    tls_server: ServerProcess, pki: dict[str, object], port_of: str
) -> None:
    port = tls_server.port if port_of == "grpc" else metrics_port(tls_server)
    garbage = [
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",  # plain HTTP
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 64,  # plain HTTP/2 (gRPC without TLS)
        b"\x16\x03\x01\xff\xff" + os.urandom(2000),  # a TLS record header, then noise
        os.urandom(4096),
    ]
    for data in garbage:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
            sock.sendall(data)
            try:
                answer = sock.recv(65536)
                while answer and len(answer) < 1 << 20:  # an alert, then the close
                    more = sock.recv(65536)
                    if not more:
                        break
                    answer += more
            except ConnectionResetError:
                answer = b""
            assert b"HTTP/1.1 200" not in answer and b"weir_" not in answer
    # still serving
    assert served_cn(port, "h2" if port_of == "grpc" else "http/1.1") == "weir-server"
    with weir.Client(tls_server.endpoint, tls=weir.Tls(ca=ca_of(pki).path)) as c:
        c.list_topics()


# ---------------------------------------------------------------------------- the CLI


def test_the_cli_speaks_tls_with_tls_ca(
    tls_server: ServerProcess, pki: dict[str, object], topic_name: str
) -> None:
    cli = Weir(tls_server.endpoint)
    ca = str(ca_of(pki).path)
    r = cli("topic", "create", topic_name, "--tls-ca", ca)
    assert r.code == 0, r.err
    r = cli("write", topic_name, input="hello\n", env={"WEIR_TLS_CA": ca})
    assert r.code == 0, r.err
    r = cli("read", topic_name, "--tls-ca", ca)
    assert (r.code, r.text) == (0, "hello\n"), r.err
    r = cli("topic", "list")
    assert r.code == 1
    assert "does it speak TLS" in one_line_error(r), r.err
    r = cli("topic", "list", "--tls-ca", str(ca_of(pki, "other").path))
    assert r.code == 1
    assert "not signed by the trusted CA" in one_line_error(r), r.err
    r = cli("topic", "list", "--tls-ca", ca, "--tls-cert", ca)
    assert (r.code, one_line_error(r)) == (2, "error: --tls-cert and --tls-key go together")


def test_the_cli_presents_a_client_certificate(
    mtls_server: ServerProcess, pki: dict[str, object]
) -> None:
    bob = issued(pki, "client")
    cli = Weir(mtls_server.endpoint)
    ca = str(ca_of(pki).path)
    r = cli("topic", "list", "--tls-ca", ca, "--tls-cert", str(bob.cert), "--tls-key", str(bob.key))
    assert r.code == 0, r.err
    r = cli("topic", "list", "--tls-ca", ca)
    assert r.code == 1
    assert "TLS handshake" in one_line_error(r), r.err


# ---------------------------------------------------------------------------- the ydb SDK


def ydb_driver(
    srv: ServerProcess,
    root_certificates: bytes | None = None,
    certificate_chain: bytes | None = None,
    private_key: bytes | None = None,
) -> ydb.Driver:
    """A driver with the SDK's own TLS options (a DriverConfig: `ydb.Driver` passes only
    ``root_certificates`` on, not the client certificate)."""
    config = ydb.DriverConfig(
        f"grpcs://{srv.endpoint}",
        DATABASE,
        root_certificates=root_certificates,
        certificate_chain=certificate_chain,
        private_key=private_key,
    )
    return ydb.Driver(driver_config=config)


def test_the_ydb_sdk_talks_tls_with_its_root_certificates(
    tls_server: ServerProcess, pki: dict[str, object], topic_name: str
) -> None:
    driver = ydb_driver(tls_server, root_certificates=ca_of(pki).pem)
    try:
        driver.wait(timeout=15, fail_fast=True)
        path = f"{DATABASE}/{topic_name}"
        driver.topic_client.create_topic(path, consumers=["c"])
        with driver.topic_client.writer(path, producer_id="ydb") as w:
            w.write(ydb.TopicWriterMessage(b"ydb over tls"))
        with driver.topic_client.reader(path, consumer="c") as r:
            msg = r.receive_message(timeout=30)
            assert msg.data == b"ydb over tls"
            r.commit_with_ack(msg)
    finally:
        driver.stop(timeout=5)


def test_the_ydb_sdk_presents_a_client_certificate(
    mtls_server: ServerProcess, pki: dict[str, object]
) -> None:
    bob = issued(pki, "client")
    driver = ydb_driver(
        mtls_server,
        root_certificates=ca_of(pki).pem,
        certificate_chain=bob.cert_pem,
        private_key=bob.key_pem,
    )
    try:
        driver.wait(timeout=15, fail_fast=True)
        driver.topic_client.create_topic(f"{DATABASE}/ydb_mtls_topic")
    finally:
        driver.stop(timeout=5)


def test_the_ydb_sdk_fails_with_the_wrong_ca(
    tls_server: ServerProcess, pki: dict[str, object]
) -> None:
    driver = ydb_driver(tls_server, root_certificates=ca_of(pki, "other").pem)
    try:
        # the SDK's own error for an endpoint it cannot reach (the handshake failure is in
        # gRPC's log), within the wait's timeout
        with pytest.raises(ydb.ConnectionFailure, match="Failed to establish connection"):
            driver.wait(timeout=15, fail_fast=True)
    finally:
        driver.stop(timeout=5)


# ---------------------------------------------------------------------------- curl


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["curl", "-sS", "--max-time", "15", *args], capture_output=True, text=True, timeout=30
    )


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_reads_the_metrics_over_https(
    tls_server: ServerProcess, pki: dict[str, object]
) -> None:
    url = f"https://127.0.0.1:{metrics_port(tls_server)}"
    ok = curl("--cacert", str(ca_of(pki).path), f"{url}/healthz")
    assert (ok.returncode, ok.stdout) == (0, "ok\n"), ok.stderr
    metrics = curl("--cacert", str(ca_of(pki).path), f"{url}/metrics")
    assert "weir_" in metrics.stdout
    wrong = curl("--cacert", str(ca_of(pki, "other").path), f"{url}/healthz")
    assert wrong.returncode == 60 and wrong.stdout == "", wrong  # peer certificate not trusted
    plain = curl(f"http://127.0.0.1:{metrics_port(tls_server)}/healthz")
    assert plain.returncode != 0 and plain.stdout == ""


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_reads_the_pulsar_admin_rest_and_the_console_over_https(
    tls_server: ServerProcess, pki: dict[str, object]
) -> None:
    """The admin REST and the console share the metrics endpoint, and so its TLS."""
    url = f"https://127.0.0.1:{metrics_port(tls_server)}"
    ca = str(ca_of(pki).path)
    tenants = curl("--cacert", ca, f"{url}/admin/v2/tenants")
    assert tenants.returncode == 0 and "public" in tenants.stdout, tenants.stderr
    console = curl("--cacert", ca, "-o", "/dev/null", "-w", "%{http_code}", f"{url}/console")
    assert (console.returncode, console.stdout) == (0, "200"), console.stderr
    wrong = curl("--cacert", str(ca_of(pki, "other").path), f"{url}/admin/v2/tenants")
    assert wrong.returncode == 60 and wrong.stdout == "", wrong


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat: tools/system-packages.sh")
def test_kcat_lists_the_kafka_port_over_ssl(
    tls_server: ServerProcess, pki: dict[str, object]
) -> None:
    """The Kafka port takes the same certificate: kcat (librdkafka) trusts it with the CA,
    refuses it with another CA, and a plain-text kcat gets nothing."""

    def kcat(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kcat", "-b", tls_server.kafka, "-L", "-m", "5", *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )

    ssl_opts = ("-X", "security.protocol=ssl")
    ok = kcat(*ssl_opts, "-X", f"ssl.ca.location={ca_of(pki).path}")
    assert ok.returncode == 0 and "broker" in ok.stdout, ok.stderr
    wrong = kcat(*ssl_opts, "-X", f"ssl.ca.location={ca_of(pki, 'other').path}")
    assert wrong.returncode != 0 and "certificate verify failed" in wrong.stderr, wrong.stderr
    plain = kcat()
    assert plain.returncode != 0, plain.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_needs_a_client_certificate_on_mtls(
    mtls_server: ServerProcess, pki: dict[str, object]
) -> None:
    bob = issued(pki, "client")
    url = f"https://127.0.0.1:{metrics_port(mtls_server)}/healthz"
    ca = str(ca_of(pki).path)
    ok = curl("--cacert", ca, "--cert", str(bob.cert), "--key", str(bob.key), url)
    assert (ok.returncode, ok.stdout) == (0, "ok\n"), ok.stderr
    refused = curl("--cacert", ca, url)
    assert refused.returncode != 0 and refused.stdout == ""
    mallory = issued(pki, "stranger")
    refused = curl("--cacert", ca, "--cert", str(mallory.cert), "--key", str(mallory.key), url)
    assert refused.returncode != 0 and refused.stdout == ""


# ---------------------------------------------------------------------------- reload


def wait_for(check: Callable[[], bool], what: str, attempts: int = 200) -> None:
    """Poll ``check`` (each call is a real handshake) a bounded number of times."""
    for _ in range(attempts):
        if check():
            return
    raise AssertionError(f"never happened: {what}")


def test_a_replaced_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "ca")
    first = ca.issue("first", stem="server")
    srv = ServerProcess(tmp_path / "data", *METRICS, env=tls_env(first))
    srv.start()
    try:
        assert srv.proc is not None
        pid = srv.proc.pid
        metrics = metrics_port(srv)
        assert served_cn(srv.port) == "first"
        assert served_cn(metrics, "http/1.1") == "first"
        # a rotation: new files in place (renamed in, as tools do), no signal
        second = ca.issue("second", stem="next")
        os.replace(second.key, first.key)
        os.replace(second.cert, first.cert)
        wait_for(lambda: served_cn(srv.port) == "second", "the gRPC port serves 'second'")
        assert served_cn(metrics, "http/1.1") == "second"
        with weir.Client(srv.endpoint, tls=weir.Tls(ca=ca.path)) as c:
            c.list_topics()
        # a bad rotation (a key of another certificate) keeps the previous certificate
        third = ca.issue("third", stem="third")
        os.replace(third.key, first.key)
        assert served_cn(srv.port) == "second"
        assert served_cn(metrics, "http/1.1") == "second"
        # the matching certificate completes it; SIGHUP loads it at once
        os.replace(third.cert, first.cert)
        os.kill(pid, signal.SIGHUP)
        wait_for(lambda: served_cn(srv.port) == "third", "the gRPC port serves 'third'")
        assert served_cn(metrics, "http/1.1") == "third"
        assert srv.proc.pid == pid and srv.proc.poll() is None  # the same process throughout
    finally:
        srv.stop()
    log = "".join(srv.log)
    assert "TLS reload failed, still serving the previous certificate" in log
    assert "does not match" in log
    assert "BEGIN" not in log  # no key material in the log


# ---------------------------------------------------------------------------- config


def test_serve_refuses_unusable_tls_settings(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "ca")
    cert = ca.issue("server", stem="server")
    other = ca.issue("other", stem="other")
    cli = Weir()
    data = str(tmp_path / "data")
    cases = {
        "tls.cert_file needs tls.key_file too": {"WEIR_TLS_CERT_FILE": str(cert.cert)},
        "does not exist": {
            "WEIR_TLS_CERT_FILE": str(tmp_path / "nope.pem"),
            "WEIR_TLS_KEY_FILE": str(cert.key),
        },
        "does not match": {
            "WEIR_TLS_CERT_FILE": str(cert.cert),
            "WEIR_TLS_KEY_FILE": str(other.key),
        },
        "tls.client_ca_file": {"WEIR_TLS_CLIENT_CA_FILE": str(ca.path)},
        "is not a PEM private key": {
            "WEIR_TLS_CERT_FILE": str(cert.cert),
            "WEIR_TLS_KEY_FILE": str(cert.cert),
        },
        "tls.peer_ca_file": {"WEIR_TLS_PEER_CA_FILE": str(ca.path)},  # no TLS of its own
        "has no usable CA certificate": {
            "WEIR_TLS_CERT_FILE": str(cert.cert),
            "WEIR_TLS_KEY_FILE": str(cert.key),
            "WEIR_TLS_PEER_CA_FILE": str(cert.key),
        },
    }
    for expected, env in cases.items():
        r = cli("serve", "--data-dir", data, "--listen", "127.0.0.1:0", env=env)
        assert r.code == 2, (expected, r.err)
        assert expected in one_line_error(r), r.err
    assert not (tmp_path / "data").exists()  # refused before the data was touched


# ---------------------------------------------------------------------------- Pulsar port


def _pulsar_client(url: str, **kwargs: object) -> pulsar.Client:
    return pulsar.Client(
        url,
        operation_timeout_seconds=3,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        **kwargs,
    )


def test_pulsar_ssl_with_the_ca_and_refused_without_it(
    tls_server: ServerProcess, pki: dict[str, object], topic_name: str
) -> None:
    url = tls_server.pulsar_url
    assert url.startswith("pulsar+ssl://127.0.0.1:")
    client = _pulsar_client(url, tls_trust_certs_file_path=str(ca_of(pki).path))
    try:
        consumer = client.subscribe(
            topic_name, "s", initial_position=pulsar.InitialPosition.Earliest
        )
        client.create_producer(topic_name).send(b"over TLS")
        assert consumer.receive(5000).data() == b"over TLS"
    finally:
        client.close()
    # the wrong CA, and plain text to the TLS port: refused, not hung
    for bad in (
        _pulsar_client(url, tls_trust_certs_file_path=str(ca_of(pki, "other").path)),
        _pulsar_client(url.replace("pulsar+ssl://", "pulsar://")),
    ):
        try:
            with pytest.raises(pulsar.PulsarException):
                bad.create_producer(topic_name)
        finally:
            bad.close()


@pytest.mark.parametrize("how", ["AuthenticationTLS", "client certificate"])
def test_pulsar_mtls_serves_a_client_certificate_of_the_ca(
    mtls_server: ServerProcess, pki: dict[str, object], topic_name: str, how: str
) -> None:
    bob = issued(pki, "client")
    kwargs: dict[str, object] = {"tls_trust_certs_file_path": str(ca_of(pki).path)}
    if how == "AuthenticationTLS":
        kwargs["authentication"] = pulsar.AuthenticationTLS(str(bob.cert), str(bob.key))
    else:
        kwargs["tls_certificate_file_path"] = str(bob.cert)
        kwargs["tls_private_key_file_path"] = str(bob.key)
    client = _pulsar_client(mtls_server.pulsar_url, **kwargs)
    try:
        producer = client.create_producer(topic_name)
        reader = client.create_reader(topic_name, producer.send(b"mutual"))
        reader.seek(pulsar.MessageId.earliest)
        assert reader.read_next(5000).data() == b"mutual"
    finally:
        client.close()


@pytest.mark.parametrize("client", ["none", "stranger"])
def test_pulsar_mtls_refuses_a_client_without_a_certificate_of_the_ca(
    mtls_server: ServerProcess, pki: dict[str, object], topic_name: str, client: str
) -> None:
    kwargs: dict[str, object] = {"tls_trust_certs_file_path": str(ca_of(pki).path)}
    if client == "stranger":
        mallory = issued(pki, "stranger")
        kwargs["authentication"] = pulsar.AuthenticationTLS(str(mallory.cert), str(mallory.key))
    c = _pulsar_client(mtls_server.pulsar_url, **kwargs)
    try:
        with pytest.raises(pulsar.PulsarException):
            c.create_producer(topic_name)
    finally:
        c.close()
