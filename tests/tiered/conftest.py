"""Fixtures of the tier's tests: both back ends, the S3 one a real HTTP endpoint (moto's
standalone server, its own process on a loopback port, spoken to like any S3)."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ServerProcess
from weir.listening_process import ListeningProcess
from weir.storage.tiered.remote_storage import (
    LocalDirStorage,
    RemoteStorage,
    S3Settings,
    S3Storage,
)

_RUNNING = re.compile(r"Running on http://(127\.0\.0\.1):(\d+)")
CREDS = {"access_key": "weir-test", "secret_key": "weir-test-secret"}


class S3Server(ListeningProcess):
    """An S3-compatible endpoint on 127.0.0.1 (moto_server); restartable on its port."""

    def __init__(self) -> None:
        super().__init__("S3 server (moto)", _RUNNING)

    def command(self) -> list[str]:
        exe = str(Path(sys.executable).with_name("moto_server"))
        return [exe, "-H", "127.0.0.1", "-p", str(self.port)]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    srv = S3Server().start()
    yield srv
    srv.stop()


def make_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDS["access_key"],
        aws_secret_access_key=CREDS["secret_key"],
    ).create_bucket(Bucket=bucket)


def s3_settings(srv: S3Server, bucket: str, **kw: object) -> S3Settings:
    return S3Settings(
        bucket=bucket,
        endpoint=srv.endpoint,
        prefix="weir-test",
        region="us-east-1",
        connect_timeout_s=1.0,
        read_timeout_s=5.0,
        max_attempts=1,
        **CREDS,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


StorageFactory = Callable[[], RemoteStorage]


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, RemoteStorage]]:
    """A fresh, empty object store of each back end."""
    if request.param == "local":
        yield "local", LocalDirStorage(tmp_path / "tier")
        return
    srv: S3Server = request.getfixturevalue("s3_server")
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    make_bucket(srv.endpoint, bucket)
    yield "s3", S3Storage(s3_settings(srv, bucket))


SMALL_BLOBS = {
    "WEIR_STORAGE_LOW_WATERMARK": "48KiB",
    "WEIR_STORAGE_MAX_BLOB_SIZE": "64KiB",
    "WEIR_TIER_INTERVAL_S": "0.3",
    "WEIR_TOPICS_RETENTION_INTERVAL_S": "0.3",
    "WEIR_TIER_PAYLOAD_GRACE_S": "1",
}


@pytest.fixture(scope="module", params=["local", "s3"])
def tier_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    env = dict(SMALL_BLOBS)
    if request.param == "s3":
        s3: S3Server = request.getfixturevalue("s3_server")
        bucket = f"srv-{uuid.uuid4().hex[:10]}"
        make_bucket(s3.endpoint, bucket)
        env.update(
            WEIR_TIER_BACKEND="s3",
            WEIR_TIER_S3_ENDPOINT=s3.endpoint,
            WEIR_TIER_S3_BUCKET=bucket,
            WEIR_TIER_S3_ACCESS_KEY=CREDS["access_key"],
            WEIR_TIER_S3_SECRET_KEY=CREDS["secret_key"],
        )
    srv = ServerProcess(tmp_path_factory.mktemp(f"tier-{request.param}"), env=env)
    srv.start()
    yield srv
    srv.stop()
