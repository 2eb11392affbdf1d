"""JWTs signed by someone the server trusts: HS256 with a shared secret, RS256 / ES256 with
the public key of the signer. The ``sub`` claim is the principal; ``exp`` is required;
``aud`` must name the configured audience when one is set.

A bearer token that does not look like a JWT (three base64url parts, the first a JSON
header) is left to the next authenticator (weir's own session tokens).
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import jwt

from weir.errors import BadRequestError, UnauthorizedError
from weir.security.authenticator import BearerToken, Credential
from weir.security.principal import Principal

_SHAPE = re.compile(r"^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$")
MAX_JWT_CHARS = 4096
HMAC_ALGORITHMS = ("HS256",)
KEY_ALGORITHMS = ("RS256", "ES256")


def looks_like_jwt(token: str) -> bool:
    return bool(_SHAPE.match(token))


class JwtVerifier:
    """Authenticates bearer JWTs with a secret (HS256) and / or a public key (RS256, ES256)."""

    def __init__(
        self, *, secret: str = "", public_key: bytes | None = None, audience: str = ""
    ) -> None:
        self._secret = secret
        self._public_key = public_key
        self.audience = audience
        self._key_algorithm = _algorithm_of(public_key) if public_key is not None else None

    @classmethod
    def from_files(cls, secret: str, public_key_file: Path | None, audience: str) -> JwtVerifier:
        key = None
        if public_key_file is not None:
            try:
                key = public_key_file.read_bytes()
            except OSError as exc:
                raise BadRequestError(
                    f"auth.jwt_public_key_file {public_key_file}: {exc.strerror}"
                ) from None
            if b"PUBLIC KEY-----" not in key:
                raise BadRequestError(
                    f"auth.jwt_public_key_file {public_key_file} is not a PEM public key"
                )
        return cls(secret=secret, public_key=key, audience=audience)

    @property
    def enabled(self) -> bool:
        return bool(self._secret) or self._public_key is not None

    def authenticate(self, credential: Credential) -> Principal | None:
        if not isinstance(credential, BearerToken) or not looks_like_jwt(credential.token):
            return None
        name = credential.name
        token = credential.token
        if len(token) > MAX_JWT_CHARS:
            raise UnauthorizedError(f"auth {name} too long ({len(token)} characters)")
        if not self.enabled:
            raise UnauthorizedError(f"JWT {name}s are not accepted by this server")
        try:
            algorithm = jwt.get_unverified_header(token).get("alg")
        except jwt.InvalidTokenError:
            raise UnauthorizedError(f"malformed auth {name}") from None
        if algorithm in HMAC_ALGORITHMS and self._secret:
            key: str | bytes = self._secret
        elif algorithm == self._key_algorithm and self._public_key is not None:
            key = self._public_key
        else:
            raise UnauthorizedError(f"JWT {name} signed with {str(algorithm)[:20]!r}: not accepted")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[str(algorithm)],
                audience=self.audience or None,
                options={"require": ["exp", "sub"], "verify_aud": bool(self.audience)},
            )
        except jwt.ExpiredSignatureError:
            raise UnauthorizedError(f"auth {name} expired") from None
        except jwt.InvalidAudienceError:
            raise UnauthorizedError(f"auth {name} is not for this server (audience)") from None
        except jwt.MissingRequiredClaimError as exc:
            raise UnauthorizedError(f"auth {name} has no {exc.claim!r} claim") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            raise UnauthorizedError(f"invalid auth {name}") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > 256:
            raise UnauthorizedError(f"auth {name} has no usable subject")
        return Principal(subject, "jwt")


def _algorithm_of(public_key: bytes) -> str:
    """RS256 for an RSA key, ES256 for an EC P-256 one (the only pairs accepted)."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(public_key)
    except (ValueError, TypeError) as exc:
        raise BadRequestError(
            f"auth.jwt_public_key_file is not a usable public key ({exc})"
        ) from None
    if isinstance(key, rsa.RSAPublicKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1":
        return "ES256"
    raise BadRequestError("auth.jwt_public_key_file must be an RSA or EC P-256 public key")


def create_token(
    subject: str,
    expires_in: dt.timedelta,
    *,
    secret: str = "",
    private_key: bytes | None = None,
    audience: str = "",
) -> str:
    """A signed JWT for ``subject`` (HS256 with ``secret``, else RS256 / ES256 by the key's
    kind); for `weir token create` and tests."""
    now = dt.datetime.now(dt.UTC)
    claims: dict[str, object] = {"sub": subject, "iat": now, "exp": now + expires_in}
    if audience:
        claims["aud"] = audience
    if private_key is not None:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        try:
            loaded = load_pem_private_key(private_key, password=None)
        except (ValueError, TypeError) as exc:
            raise BadRequestError(f"not a usable PEM private key ({exc})") from None
        if isinstance(loaded, rsa.RSAPrivateKey):
            return jwt.encode(claims, loaded, algorithm="RS256")
        if isinstance(loaded, ec.EllipticCurvePrivateKey):
            return jwt.encode(claims, loaded, algorithm="ES256")
        raise BadRequestError("the private key must be RSA (RS256) or EC P-256 (ES256)")
    if not secret:
        raise BadRequestError("give an HS256 secret or a private key to sign with")
    return jwt.encode(claims, secret, algorithm="HS256")


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` of a JWT (epoch seconds), read without checking the signature: only for a
    token that was verified already (to know when an open stream it opened must end)."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except (jwt.PyJWTError, ValueError, TypeError):
        return None
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None
