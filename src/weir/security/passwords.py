"""Password hashes: scrypt (memory-hard, in the standard library), self-describing strings.

``scrypt$<log2 n>$<r>$<p>$<salt>$<hash>`` (salt and hash URL-safe base64): the
parameters travel with the hash, so raising them later leaves old hashes valid.
At n = 2**14, r = 8 one check takes 16 MiB and some tens of milliseconds: cheap
for a login, which a client does once per token, and slow for a guesser.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

LOG2_N, R, P = 14, 8, 1
_DKLEN = 32
_MAXMEM = 64 << 20


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=1 << log2_n, r=r, p=p, maxmem=_MAXMEM, dklen=_DKLEN
    )


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = _scrypt(password, salt, LOG2_N, R, P)
    return f"scrypt${LOG2_N}${R}${P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """True when ``password`` hashes to ``stored`` (constant-time compare)."""
    try:
        scheme, log2_n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = _unb64(digest)
        actual = _scrypt(password, _unb64(salt), int(log2_n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


_dummy: list[str] = []


def dummy_hash() -> str:
    """A hash to check against for an unknown user, so timing does not tell which exist."""
    if not _dummy:
        _dummy.append(hash_password(os.urandom(8).hex()))
    return _dummy[0]
