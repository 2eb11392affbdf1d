"""SCRAM's server side against an RFC 7677 test vector and a client written from the RFC."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from weir.errors import UnauthorizedError
from weir.security.scram import ScramExchange, derive


def _client(
    password: str, mechanism: str, first: bytes, server_first: bytes, cnonce: str
) -> tuple[bytes, bytes]:
    """(client final message, expected server signature), computed as a client does."""
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    attrs = dict(p.split("=", 1) for p in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        h, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored = hashlib.new(h, client_key).digest()
    without = f"c=biws,r={attrs['r']}"
    auth = b",".join([first[3:], server_first, without.encode()])
    proof = bytes(
        a ^ b for a, b in zip(client_key, hmac.new(stored, auth, h).digest(), strict=True)
    )
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return f"{without},p={base64.b64encode(proof).decode()}".encode(), hmac.new(
        server_key, auth, h
    ).digest()


def test_rfc7677_keys() -> None:
    # RFC 7677 section 3: user "user", password "pencil", this salt and 4096 iterations
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = derive("pencil", "SCRAM-SHA-256", salt, 4096)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    assert cred.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    assert (
        base64.b64encode(
            hmac.new(
                cred.server_key,
                b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
                "sha256",
            ).digest()
        )
        == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_login_round_trip_and_wrong_passwords(mechanism: str) -> None:
    creds = {("alice", mechanism): derive("right-password", mechanism)}

    def lookup(user: str, mech: str):  # type: ignore[no-untyped-def]
        return creds.get((user, mech))

    for password, ok in (("right-password", True), ("wrong-password", False)):
        ex = ScramExchange(mechanism, lookup, b"k" * 32)
        first = b"n,,n=alice,r=abc123"
        server_first = ex.first(first)
        final, signature = _client(password, mechanism, first, server_first, "abc123")
        if ok:
            assert ex.final(final) == b"v=" + base64.b64encode(signature)
        else:
            with pytest.raises(UnauthorizedError):
                ex.final(final)
    # an unknown user gets a salt like anyone's, the same each time, and a refusal at the end
    a = ScramExchange(mechanism, lookup, b"k" * 32).first(b"n,,n=ghost,r=x")
    b = ScramExchange(mechanism, lookup, b"k" * 32).first(b"n,,n=ghost,r=y")
    assert a.split(b",")[1:] == b.split(b",")[1:]
