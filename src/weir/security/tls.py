"""TLS for the server's listeners: certificate, key and client CA, reloaded without a restart.

`ServerTls` holds the files named by the ``[tls]`` config and the material last
loaded from them. Every new connection asks it for the current material (one
``stat`` of each file): when a file changed since the last load, it is loaded
again first, so replacing the certificate on disk takes effect at the next
handshake; `reload` does the same on demand (``weir serve`` calls it on SIGHUP).
A replacement that does not load (a half-written file, a key that does not
match the certificate) is logged and the previous material stays in use:
a bad rotation never takes the listener down.

The gRPC port (native and YDB fronts) takes `grpc_credentials` (gRPC's dynamic
server credentials, which ask for new material at each handshake); the HTTP
metrics endpoint takes `ssl_context`, whose SNI callback hands each handshake
the context of the current material.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from weir.security.authenticator import ClientCertificate

log = logging.getLogger("weir.security.tls")


class TlsConfigError(Exception):
    """The configured certificate, key or CA cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class TlsFiles:
    """Where the listener's certificate (chain), private key and client CA bundle are."""

    cert: Path
    key: Path
    client_ca: Path | None = None  # set: clients present a certificate signed by it (mTLS)
    peer_ca: Path | None = None  # the other brokers' certificates are checked with it (at start)

    def paths(self) -> tuple[Path, ...]:
        return (self.cert, self.key) + ((self.client_ca,) if self.client_ca else ())


@dataclass(frozen=True)
class TlsMaterial:
    """One loaded generation of the files (the key is never shown)."""

    generation: int
    cert: bytes
    key: bytes = field(repr=False)
    client_ca: bytes | None
    context: ssl.SSLContext = field(repr=False)


Stamp = tuple[tuple[int, int, int], ...]


def _stamp(files: TlsFiles) -> Stamp:
    out = []
    for p in files.paths():
        st = os.stat(p)
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TlsConfigError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise TlsConfigError(f"{what} {path} is a directory") from None
    except PermissionError:
        raise TlsConfigError(f"{what} {path} is not readable") from None


def load_material(files: TlsFiles, generation: int) -> TlsMaterial:
    """Read and check the files: the key must match the certificate, the CA must parse."""
    cert = _read(files.cert, "tls.cert_file")
    key = _read(files.key, "tls.key_file")
    ca = _read(files.client_ca, "tls.client_ca_file") if files.client_ca else None
    if b"-----BEGIN" not in cert:
        raise TlsConfigError(f"tls.cert_file {files.cert} is not a PEM certificate")
    if b"PRIVATE KEY-----" not in key:
        raise TlsConfigError(f"tls.key_file {files.key} is not a PEM private key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except ssl.SSLError as exc:
        why = "does not match" if "MISMATCH" in str(exc) else f"cannot be used with ({exc.reason})"
        raise TlsConfigError(f"tls.key_file {files.key} {why} tls.cert_file {files.cert}") from None
    if ca is not None:
        _load_ca(ctx, ca, f"tls.client_ca_file {files.client_ca}")
        ctx.verify_mode = ssl.CERT_REQUIRED
    return TlsMaterial(generation, cert, key, ca, ctx)


def _load_ca(ctx: ssl.SSLContext, ca: bytes, what: str) -> None:
    try:
        ctx.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(f"{what} has no usable CA certificate ({exc})") from None


def _peer_roots(path: Path | None) -> bytes | None:
    """The CA bundle of tls.peer_ca_file, checked (None: unset)."""
    if path is None:
        return None
    ca = _read(path, "tls.peer_ca_file")
    _load_ca(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), ca, f"tls.peer_ca_file {path}")
    return ca


class ServerTls:
    """The listeners' TLS material, reloaded when its files change or on `reload`."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._stamp = _stamp_or_none(files)
        self._material = load_material(files, 1)  # a bad start fails here, loudly
        self._peer_roots = _peer_roots(files.peer_ca)
        self._failed_stamp: Stamp | None = None
        self._grpc_served: TlsMaterial | None = None

    @property
    def generation(self) -> int:
        """1 for the material loaded at start, one more for each successful reload."""
        return self._material.generation

    @property
    def mutual(self) -> bool:
        return self.files.client_ca is not None

    def current(self) -> TlsMaterial:
        """The material for a new connection, loaded again first when a file changed."""
        stamp = _stamp_or_none(self.files)
        if stamp is not None and stamp != self._stamp and stamp != self._failed_stamp:
            self._load(stamp)
        return self._material

    def reload(self) -> bool:
        """Load the files again now (SIGHUP); False (and a logged reason) if they do not load."""
        return self._load(_stamp_or_none(self.files))

    def _load(self, stamp: Stamp | None) -> bool:
        with self._lock:
            try:
                material = load_material(self.files, self._material.generation + 1)
            except TlsConfigError as exc:
                self._failed_stamp = stamp
                log.error("TLS reload failed, still serving the previous certificate: %s", exc)
                return False
            self._material = material
            self._stamp = stamp
            self._failed_stamp = None
        log.info(
            "TLS certificate reloaded",
            extra={"generation": material.generation, "cert_file": str(self.files.cert)},
        )
        return True

    # ------------------------------------------------------------------ listeners

    def peer_credentials(self) -> grpc.ChannelCredentials:
        """How this broker calls the other brokers of its cluster, which serve TLS as it does:
        their certificates checked with tls.peer_ca_file (or the system's roots), and this
        broker's own certificate presented to those that ask for one (tls.client_ca_file on
        every broker: its CA must trust the brokers' certificates, which must allow client
        authentication). Made when the Kafka front starts: a renewed certificate is
        presented to peers after a restart (the served one is reloaded at once)."""
        material = self.current()
        return grpc.ssl_channel_credentials(
            root_certificates=self._peer_roots,
            private_key=material.key,
            certificate_chain=material.cert,
        )

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials that take new material at the next handshake after a change."""

        def configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
            return grpc.ssl_server_certificate_configuration(
                [(material.key, material.cert)], material.client_ca
            )

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            # called by gRPC before each handshake; None keeps the configuration it has
            try:
                material = self.current()
            except Exception:  # never let a reload problem break the handshake path
                log.exception("TLS material check failed")
                return None
            if material is self._grpc_served:
                return None
            self._grpc_served = material
            return configuration(material)

        first = self.current()
        self._grpc_served = first
        return grpc.dynamic_ssl_server_credentials(
            configuration(first),
            fetch,
            require_client_authentication=self.mutual,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A context for asyncio servers whose handshakes use the current material."""
        front = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        front.minimum_version = ssl.TLSVersion.TLSv1_2
        front.load_cert_chain(self.files.cert, self.files.key)
        material = self.current()
        if material.client_ca is not None:  # the same checks as every later context
            front.load_verify_locations(cadata=material.client_ca.decode("ascii", "replace"))
            front.verify_mode = material.context.verify_mode

        def pick(sock: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> None:
            try:
                sock.context = self.current().context
            except Exception:
                log.exception("TLS material check failed")
            return None

        front.sni_callback = pick
        return front


def client_certificate(context: grpc.aio.ServicerContext) -> ClientCertificate | None:
    """The verified client certificate of a gRPC call's connection (mTLS), if it has one."""
    try:
        auth = context.auth_context()
    except Exception:  # pragma: no cover - a context without a transport
        return None
    names = auth.get("x509_common_name") or ()
    if not names:
        return None
    name = names[0]
    return ClientCertificate(name.decode(errors="replace") if isinstance(name, bytes) else name)


def peer_host(context: grpc.aio.ServicerContext) -> str:
    """The client's address without its port ("ipv4:127.0.0.1:5000" -> "127.0.0.1")."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if kind in ("ipv4", "ipv6") else peer
    return host.strip("[]")


def _stamp_or_none(files: TlsFiles) -> Stamp | None:
    """The files' change stamp; None while one is missing (mid-rotation): keep what we have."""
    try:
        return _stamp(files)
    except OSError:
        return None
