"""SCRAM (RFC 5802 / 7677): salted challenge-response logins, SHA-256 and SHA-512.

The server keeps, per user and mechanism, a salt, an iteration count and two keys
derived from the password (StoredKey, ServerKey): never the password, and the keys do not
let anyone log in. A login is two messages each way; the server checks the client's proof
against StoredKey and proves itself with ServerKey.

Pure: `ScramExchange` takes the messages and a lookup of credentials; `weir.security`
supplies the lookup (stored users keep their keys beside their scrypt hash, static users
get theirs derived at start) and the throttle and audit around it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from weir.errors import UnauthorizedError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
ITERATIONS = 4096  # Kafka's minimum; the keys are stored, so logins pay it only on the client
_GS2 = "n,,"


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, object]:
        return {
            "salt": base64.b64encode(self.salt).decode(),
            "i": self.iterations,
            "stored": base64.b64encode(self.stored_key).decode(),
            "server": base64.b64encode(self.server_key).decode(),
        }

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> ScramCredential:
        return cls(
            base64.b64decode(str(doc["salt"])),
            int(str(doc["i"])),
            base64.b64decode(str(doc["stored"])),
            base64.b64decode(str(doc["server"])),
        )


def derive(
    password: str, mechanism: str, salt: bytes | None = None, iterations: int = ITERATIONS
) -> ScramCredential:
    """The keys of ``password`` for ``mechanism`` (a fresh salt unless given)."""
    h = MECHANISMS[mechanism]
    salt = secrets.token_bytes(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    return ScramCredential(
        salt,
        iterations,
        hashlib.new(h, client_key).digest(),
        hmac.new(salted, b"Server Key", h).digest(),
    )


def derive_all(password: str) -> dict[str, ScramCredential]:
    return {m: derive(password, m) for m in MECHANISMS}


Lookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> keys


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def _attrs(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out


class ScramExchange:
    """The server side of one SCRAM login: `first` then `final`."""

    def __init__(self, mechanism: str, lookup: Lookup, decoy_key: bytes) -> None:
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism]
        self.lookup = lookup
        self.decoy_key = decoy_key  # makes a stable fake salt for users that do not exist
        self.user = ""
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""

    def first(self, message: bytes) -> bytes:
        """The client's first message -> the server's (salt, iterations, nonce)."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise UnauthorizedError("SCRAM: the first message is not utf-8") from None
        if not text.startswith(_GS2):
            raise UnauthorizedError("SCRAM: channel binding and authzid are not supported")
        bare = text[len(_GS2) :]
        attrs = _attrs(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise UnauthorizedError("SCRAM: the first message needs n= and r=")
        self.user = _unescape(attrs["n"])
        self._client_first_bare = bare
        self._credential = self.lookup(self.user, self.mechanism)
        if self._credential is not None:
            salt, iterations = self._credential.salt, self._credential.iterations
        else:  # the same answer as for a real user: a refusal tells nothing about who exists
            salt = hmac.new(self.decoy_key, self.user.encode(), "sha256").digest()[:16]
            iterations = ITERATIONS
        self._nonce = attrs["r"] + secrets.token_urlsafe(18)
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """The client's proof -> the server's signature; UnauthorizedError when wrong."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise UnauthorizedError("SCRAM: the final message is not utf-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        attrs = _attrs(without_proof)
        if not sep or attrs.get("r") != self._nonce or not self._nonce:
            raise UnauthorizedError("SCRAM: bad final message or nonce")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise UnauthorizedError("SCRAM: the proof is not base64") from None
        auth = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        if cred is None or len(proof) != len(cred.stored_key):
            raise UnauthorizedError("Invalid user or password")
        signature = hmac.new(cred.stored_key, auth, self.hash).digest()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), cred.stored_key):
            raise UnauthorizedError("Invalid user or password")
        server_signature = hmac.new(cred.server_key, auth, self.hash).digest()
        return b"v=" + base64.b64encode(server_signature)
