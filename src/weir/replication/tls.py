"""TLS with client certificates (mutual TLS) between ledger clients and bookies.

A bookie started with ``--tls-cert``, ``--tls-key`` and ``--tls-ca`` speaks TLS
only and accepts a connection only from a client whose certificate the CA
signed: the certificate is the client's authentication (no other login on the
bookie port). Clients (`LedgerClient(tls=BookieTls(...))`) verify the bookie's
certificate against the same CA and its name against the bookie's host (the
bookie id's ``host``), and present their own. Without these options a bookie
speaks plain TCP and trusts its network (docs/replication.md).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

from weir.errors import BadRequestError


@dataclass(frozen=True)
class BookieTls:
    """The CA that signs every bookie's and client's certificate, and this side's own
    certificate and key (PEM files)."""

    ca: Path
    cert: Path
    key: Path = field(repr=False)

    def server_context(self) -> ssl.SSLContext:
        """A bookie's: its certificate, and client certificates required and verified."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """A client's: the bookie's certificate and host verified, its own presented."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(ctx)
        return ctx

    def _load(self, ctx: ssl.SSLContext) -> None:
        try:
            ctx.load_verify_locations(cafile=str(self.ca))
            ctx.load_cert_chain(str(self.cert), str(self.key))
        except (OSError, ssl.SSLError) as exc:
            raise BadRequestError(f"bookie TLS files ({self.ca}, {self.cert}): {exc}") from None
