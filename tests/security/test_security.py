"""weir.security on its own: static users, signed tokens, the anonymous rule; the SDK's token source."""

from __future__ import annotations

import asyncio
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.client.credentials import TokenSource, UserPassword, as_credentials
from weir.errors import BadRequestError, TokenRejectedError, UnauthorizedError
from weir.protocols.native import weir_pb2 as pb
from weir.security import (
    ANONYMOUS,
    BearerToken,
    Principal,
    Security,
    StaticUsers,
    TokenIssuer,
)
from weir.security import UserPassword as Login

SECRET = b"s" * 32


def security(
    users: dict[str, str] | None = None, *, anonymous: bool = False, ttl_s: float = 60
) -> Security:
    static = StaticUsers({"ann": "pw1"} if users is None else users)
    return Security(
        static, TokenIssuer(SECRET, static.fingerprint, ttl_s=ttl_s), allow_anonymous=anonymous
    )


def test_login_gives_a_token_that_authenticates_as_the_user() -> None:
    sec = security()
    issued = sec.login("ann", "pw1")
    assert issued.principal == Principal("ann", "password")
    assert 59_000 < issued.expires_in_ms <= 60_000
    assert "pw1" not in repr(issued) and issued.token not in repr(issued)
    assert sec.authenticate(BearerToken(issued.token)) == Principal("ann", "token")
    assert sec.authenticate(Login("ann", "pw1")) == Principal("ann", "password")
    for user, password in (("ann", "pw2"), ("bob", "pw1"), ("", "")):
        with pytest.raises(UnauthorizedError, match=r"^Invalid user or password$"):
            sec.login(user, password)


def test_anonymous_calls_follow_the_setting() -> None:
    with pytest.raises(UnauthorizedError, match="authentication required"):
        security().authenticate(None)
    assert security(anonymous=True).authenticate(None) is ANONYMOUS
    # a token that is present must be valid even when anonymous calls are allowed
    with pytest.raises(UnauthorizedError, match="malformed auth token"):
        security(anonymous=True).authenticate(BearerToken("garbage"))


def test_bad_tokens_are_refused_and_only_stale_ones_are_worth_a_new_login() -> None:
    sec = security()
    token = sec.login("ann", "pw1").token
    for bad in ("", "garbage", "a.b.c", "x" * 5000, token + ".more"):
        with pytest.raises(UnauthorizedError, match="malformed auth ticket"):
            sec.authenticate(BearerToken(bad, "ticket"))
    with pytest.raises(TokenRejectedError, match="invalid auth token") as err:
        sec.authenticate(BearerToken(token[:-2] + ("AA" if token[-2:] != "AA" else "BB")))
    assert err.value.retryable
    expired = security(ttl_s=-1).login("ann", "pw1").token
    with pytest.raises(TokenRejectedError, match="auth token expired: log in again"):
        sec.authenticate(BearerToken(expired))
    # another secret, a changed password, a removed user: the token is no longer good
    static = StaticUsers({"ann": "pw1"})
    other = Security(static, TokenIssuer(b"t" * 32, static.fingerprint), allow_anonymous=False)
    for s in (other, security({"ann": "changed"}), security({"bob": "pw1"})):
        with pytest.raises(TokenRejectedError, match="invalid auth token"):
            s.authenticate(BearerToken(token))


@given(
    st.sampled_from(["ann", "alice", "bo"]),
    st.integers(min_value=0),
    st.sampled_from(string.ascii_letters + string.digits + "-_.="),
)
def test_any_change_to_a_token_is_refused(user: str, position: int, char: str) -> None:
    sec = security({"ann": "pw1", "alice": "pw2", "bo": "pw3"})
    token = sec.login(user, {"ann": "pw1", "alice": "pw2", "bo": "pw3"}[user]).token
    i = position % len(token)
    tampered = token[:i] + char + token[i + 1 :]
    if tampered != token:
        with pytest.raises((UnauthorizedError, TokenRejectedError)):
            sec.authenticate(BearerToken(tampered))


def test_credentials_arguments() -> None:
    assert as_credentials(("ann", "pw1")) == UserPassword("ann", "pw1")
    assert as_credentials(None) is None
    assert "pw1" not in repr(UserPassword("ann", "pw1"))
    for bad in (("ann",), ("", "pw"), "ann:pw1", ("ann", 5)):
        with pytest.raises(BadRequestError, match="credentials must be"):
            as_credentials(bad)  # type: ignore[arg-type]


async def test_the_token_source_logs_in_once_then_again_when_due_or_refused() -> None:
    answers: list[int] = []  # expires_in_ms of each login

    async def login(req: pb.LoginRequest) -> pb.LoginResponse:
        assert (req.user, req.password) == ("ann", "pw1")
        await asyncio.sleep(0)
        answers.append(len(answers))
        return pb.LoginResponse(token=f"t{len(answers)}", expires_in_ms=3_600_000)

    source = TokenSource(UserPassword("ann", "pw1"))
    source.bind(login)
    assert await asyncio.gather(*(source.token() for _ in range(5))) == ["t1"] * 5
    assert source.logins == 1
    source.refused("not-the-current-one")
    assert await source.token() == "t1"
    source.refused("t1")
    assert await source.token() == "t2"

    async def short_lived(req: pb.LoginRequest) -> pb.LoginResponse:
        answers.append(0)
        return pb.LoginResponse(token=f"s{len(answers)}", expires_in_ms=0)

    source.bind(short_lived)
    source.refused("t2")
    first = await source.token()
    assert await source.token() != first  # expired at once: every call logs in again

    async def refuse(req: pb.LoginRequest) -> pb.LoginResponse:
        raise UnauthorizedError("Invalid user or password")

    source.bind(refuse)
    with pytest.raises(
        UnauthorizedError, match=r"^login as 'ann' refused: Invalid user or password$"
    ):
        await source.token()
