"""Users kept in the data directory: name -> scrypt hash, managed with `weir user ...`.

They live in the broker's ``server`` table under ``user/<name>`` (one KV commit
per change, durable like any write) and in memory for checks. Changing a
password or deleting a user changes the user's fingerprint, which revokes every
token issued to the user (see `weir.security.tokens`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from weir.errors import AlreadyExistsError, BadRequestError, NotFoundError, UnauthorizedError
from weir.security.authenticator import Credential, UserPassword
from weir.security.passwords import dummy_hash, hash_password, verify_password
from weir.security.principal import Principal
from weir.security.scram import ScramCredential, derive_all
from weir.storage.kv import KV, Op, delete, put

PREFIX = b"user/"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
MIN_PASSWORD = 8
MAX_PASSWORD = 1024


@dataclass(frozen=True)
class UserRecord:
    name: str
    password_hash: str
    created_ms: int
    # SCRAM keys by mechanism (Kafka's SASL SCRAM); users stored before they existed have
    # none until their password is set again
    scram: dict[str, ScramCredential] = field(default_factory=dict)

    def encode(self) -> bytes:
        doc: dict[str, object] = {"hash": self.password_hash, "created_ms": self.created_ms}
        if self.scram:
            doc["scram"] = {m: c.to_json() for m, c in self.scram.items()}
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, name: str, raw: bytes) -> UserRecord:
        doc = json.loads(raw)
        scram = {m: ScramCredential.from_json(c) for m, c in doc.get("scram", {}).items()}
        return cls(name, str(doc["hash"]), int(doc["created_ms"]), scram)


def check_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise BadRequestError(
            f"bad user name {name[:140]!r}: 1 to 128 of letters, digits and . _ @ -, "
            "starting with a letter or digit"
        )
    return name


def check_password(password: str) -> str:
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise BadRequestError(
            f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters (got {len(password)})"
        )
    return password


class StoredUsers:
    """The users of the data directory; `commit` writes a change durably (KV ops)."""

    def __init__(self, kv: KV, table: str, commit: Callable[[list[Op]], object]) -> None:
        self._table = table
        self._commit = commit
        self._users: dict[str, UserRecord] = {}
        for key, raw in kv.scan(table, PREFIX, PREFIX[:-1] + b"0"):  # "0" follows "/"
            name = key[len(PREFIX) :].decode()
            self._users[name] = UserRecord.decode(name, raw)
        self.on_change: list[Callable[[str], None]] = []

    def __len__(self) -> int:
        return len(self._users)

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def names(self) -> list[str]:
        return sorted(self._users)

    def get(self, name: str) -> UserRecord | None:
        return self._users.get(name)

    def add(self, name: str, password: str) -> UserRecord:
        check_name(name)
        if name in self._users:
            raise AlreadyExistsError(f"user {name!r} already exists")
        check_password(password)
        return self._store(
            UserRecord(name, hash_password(password), _now_ms(), derive_all(password))
        )

    def set_password(self, name: str, password: str) -> UserRecord:
        old = self._users.get(name)
        if old is None:
            raise NotFoundError(f"user {name!r} does not exist")
        check_password(password)
        return self._store(
            UserRecord(name, hash_password(password), old.created_ms, derive_all(password))
        )

    def delete(self, name: str) -> None:
        if name not in self._users:
            raise NotFoundError(f"user {name!r} does not exist")
        self._commit([delete(self._table, PREFIX + name.encode())])
        del self._users[name]
        self._changed(name)

    def _store(self, record: UserRecord) -> UserRecord:
        self._commit([put(self._table, PREFIX + record.name.encode(), record.encode())])
        self._users[record.name] = record
        self._changed(record.name)
        return record

    def _changed(self, name: str) -> None:
        for callback in self.on_change:
            callback(name)

    def authenticate(self, credential: Credential) -> Principal | None:
        """The user of a correct password; None for a user this store does not have."""
        if not isinstance(credential, UserPassword):
            return None
        record = self._users.get(credential.user)
        if record is None:
            return None
        if not verify_password(credential.password, record.password_hash):
            raise UnauthorizedError("Invalid user or password")
        return Principal(credential.user, "password")

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        record = self._users.get(user)
        return None if record is None else record.scram.get(mechanism)

    def fingerprint(self, user: str) -> bytes | None:
        record = self._users.get(user)
        return None if record is None else hashlib.sha256(record.password_hash.encode()).digest()


def burn_time(password: str) -> None:
    """Spend what a check of a stored user costs (for an unknown user)."""
    verify_password(password, dummy_hash())


def _now_ms() -> int:
    return int(time.time() * 1000)
