"""TLS for the client: which CA to trust, which certificate to show, and the ``grpcs://`` form.

`weir.Client("grpcs://host:2136")` speaks TLS and trusts the system's CAs;
``tls=weir.Tls(ca="ca.pem")`` trusts a private CA instead (a path or PEM bytes),
and ``cert=`` / ``key=`` present a client certificate to a server that asks for
one (mTLS). Giving ``tls=`` turns TLS on whatever the endpoint's scheme.
"""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from weir.errors import BadRequestError

PemSource = str | Path | bytes


@dataclass(frozen=True)
class Tls:
    """TLS options of a client: ``ca`` (None: the system's CAs), client ``cert`` and ``key``,
    and ``server_name`` when the certificate names the server otherwise than the endpoint."""

    ca: PemSource | None = None
    cert: PemSource | None = None
    key: PemSource | None = field(default=None, repr=False)
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise BadRequestError("a client certificate needs both cert= and key=")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """gRPC credentials with the PEM files read now (a missing file is a clear error)."""
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca, "CA file"),
            private_key=_pem(self.key, "client key file"),
            certificate_chain=_pem(self.cert, "client certificate file"),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The same trust and client certificate for a plain socket (the native TCP port)."""
        ca = _pem(self.ca, "CA file")
        ctx = ssl.create_default_context(cadata=ca.decode("ascii") if ca is not None else None)
        cert = _pem(self.cert, "client certificate file")
        key = _pem(self.key, "client key file")
        if cert is not None and key is not None:
            # load_cert_chain takes files only: PEM given as bytes goes through a private one
            with tempfile.TemporaryDirectory() as tmp:
                cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
                cert_path.write_bytes(cert)
                key_path.touch(mode=0o600)
                key_path.write_bytes(key)
                ctx.load_cert_chain(cert_path, key_path)
        return ctx

    def channel_options(self) -> list[tuple[str, str]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


TlsArg = Tls | bool | None


def as_tls(value: TlsArg, scheme_tls: bool) -> Tls | None:
    """The TLS options of a connection: ``tls=`` wins, else ``grpcs://`` means system CAs."""
    if isinstance(value, Tls):
        return value
    if value is True or (value is None and scheme_tls):
        return Tls()
    if value is False or value is None:
        if value is False and scheme_tls:
            raise BadRequestError("a grpcs:// endpoint speaks TLS: do not pass tls=False")
        return None
    raise BadRequestError("tls must be weir.Tls(ca=..., cert=..., key=...), True or None")


def _pem(source: PemSource | None, what: str) -> bytes | None:
    if source is None or isinstance(source, bytes):
        return source
    path = Path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadRequestError(f"TLS {what} {path} does not exist") from None
    except IsADirectoryError:
        raise BadRequestError(f"TLS {what} {path} is a directory") from None
    except PermissionError:
        raise BadRequestError(f"TLS {what} {path} is not readable") from None
    if b"-----BEGIN" not in data:
        raise BadRequestError(f"TLS {what} {path} is not PEM")
    return data
