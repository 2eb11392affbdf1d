"""Throwaway certificate authorities and certificates for the TLS tests (made with `cryptography`)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass
class Issued:
    """A certificate and its key, as PEM, written to ``cert`` and ``key`` files."""

    cert_pem: bytes
    key_pem: bytes
    cert: Path
    key: Path
    subject: str


class Authority:
    """A self-signed CA that issues server and client certificates into a directory."""

    def __init__(self, directory: Path, name: str = "weir test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._key = _key()
        now = dt.datetime.now(dt.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM)
        self.path = directory / f"{_slug(name)}.pem"
        self.path.write_bytes(self.pem)

    def issue(
        self, cn: str, *, server: bool = True, stem: str | None = None, client_too: bool = False
    ) -> Issued:
        """A certificate for ``cn``: a server one (for localhost and 127.0.0.1) or a client one;
        ``client_too``: a server one that may also authenticate a client (a broker's, that
        calls the other brokers of its cluster)."""
        key = _key()
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            ).add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH]
                    + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_too else [])
                ),
                False,
            )
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False
            )
        cert = builder.sign(self._key, hashes.SHA256())
        stem = stem or _slug(cn)
        issued = Issued(
            cert.public_bytes(serialization.Encoding.PEM),
            _pem_key(key),
            self.directory / f"{stem}.pem",
            self.directory / f"{stem}.key",
            cn,
        )
        issued.cert.write_bytes(issued.cert_pem)
        issued.key.write_bytes(issued.key_pem)
        issued.key.chmod(0o600)
        return issued


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower())


def subject_cn(der: bytes) -> str:
    """The common name of a DER certificate (what a TLS peer presented)."""
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
