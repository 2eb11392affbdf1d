"""The object store under the tier: one small interface, two back ends.

`RemoteStorage` is what the tier needs of an object store (Kafka's
RemoteStorageManager, reduced to whole objects): put, get (whole or a byte
range), head, delete and list under a prefix. Keys are relative to the back
end's own prefix.

- `LocalDirStorage`: a directory (the embedded default; no service needed). A put
  writes a temporary file, fsyncs it, renames it into place and fsyncs the
  directory, so an object is either absent or whole after a crash.
- `S3Storage`: any S3-compatible endpoint (AWS, MinIO, Ceph RGW, ...) through
  obstore. Nothing in it knows which server answers.

Errors: a store that cannot be reached (connection refused, timeouts, 5xx,
throttling) raises `TierUnavailableError` (retryable); a missing object
`ObjectMissingError`; anything else about the request is `TierError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from weir.errors import ObjectMissingError, TierError, TierUnavailableError


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What the store says of an object: its size, ETag (as the store gives it, without
    quotes; "" when it has none) and last modification (ms since the epoch)."""

    key: str
    size: int
    etag: str
    modified_ms: int


class RemoteStorage(Protocol):
    """An object store: whole objects under string keys (relative to the store's prefix)."""

    name: str  # "local" or "s3": reported by status and metrics

    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Store ``data`` under ``key`` (replacing any object there); durable on return."""
        ...

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (to its end when ``end`` is None)."""
        ...

    def head(self, key: str) -> ObjectInfo | None:
        """The object's info, None when it does not exist."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object (no error when it is already gone)."""
        ...

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""
        ...

    def describe(self) -> dict[str, str]:
        """Where the objects are, for readers that go to the store themselves (Spark):
        never credentials."""
        ...


def md5_etag(data: bytes | memoryview) -> str:
    """The ETag S3 gives an object stored in one PUT without SSE-KMS: the MD5 in hex."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


# ---------------------------------------------------------------------------- local


class LocalDirStorage:
    """Objects as files under ``root`` (keys are relative paths, '/'-separated)."""

    name = "local"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise TierError(f"bad object key {key!r}")
        return self.root / key

    def put(self, key: str, data: bytes) -> ObjectInfo:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise TierUnavailableError(f"local tier: cannot write {key}: {exc}") from None
        # no ETag: the caller verifies by reading back (a local read and a CRC32C are far
        # cheaper than an MD5 of every object)
        return ObjectInfo(key, len(data), "", int(time.time() * 1000))

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                if start:
                    f.seek(start)
                return f.read() if end is None else f.read(max(0, end - start))
        except FileNotFoundError:
            raise ObjectMissingError(f"object {key} is not in the local tier") from None
        except OSError as exc:
            raise TierUnavailableError(f"local tier: cannot read {key}: {exc}") from None

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TierUnavailableError(f"local tier: {exc}") from None
        return ObjectInfo(key, st.st_size, "", int(st.st_mtime * 1000))

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise TierUnavailableError(f"local tier: cannot delete {key}: {exc}") from None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        out: list[ObjectInfo] = []
        for dirpath, _, files in os.walk(self.root):
            for f in files:
                if f.startswith("."):  # a temporary file of a put in flight (or torn)
                    continue
                p = Path(dirpath) / f
                key = p.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    try:
                        st = p.stat()
                    except FileNotFoundError:
                        continue
                    out.append(ObjectInfo(key, st.st_size, "", int(st.st_mtime * 1000)))
        return iter(sorted(out, key=lambda o: o.key))

    def describe(self) -> dict[str, str]:
        return {"backend": "local", "path": str(self.root.resolve())}


# ---------------------------------------------------------------------------- S3


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Where the S3 objects live and how to reach them."""

    bucket: str
    endpoint: str = ""  # "" : AWS's own endpoint for the region
    prefix: str = ""
    region: str = "us-east-1"
    access_key: str = ""  # "": the client's own chain (AWS_* environment, instance role)
    secret_key: str = ""
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_attempts: int = 3  # tries of one request (the client's retries), before ours


class S3Storage:
    """Objects in an S3 bucket under ``prefix`` through obstore (Rust's object_store:
    measured 2-3x boto3's MB/s at a third to half its CPU per MB, bench/tier_bench.py)."""

    name = "s3"

    def __init__(self, settings: S3Settings) -> None:
        from obstore.store import S3Store

        self.settings = settings
        self.prefix = settings.prefix.strip("/")
        kwargs: dict[str, Any] = {
            "region": settings.region,
            "virtual_hosted_style_request": False,
            "client_options": {
                "allow_http": True,
                "connect_timeout": timedelta(seconds=settings.connect_timeout_s),
                "timeout": timedelta(seconds=settings.read_timeout_s),
            },
            "retry_config": {
                "max_retries": max(0, settings.max_attempts - 1),
                "retry_timeout": timedelta(seconds=settings.read_timeout_s),
            },
        }
        if settings.endpoint:
            kwargs["endpoint"] = settings.endpoint
        if settings.access_key:
            kwargs["access_key_id"] = settings.access_key
            kwargs["secret_access_key"] = settings.secret_key
        self._store = S3Store(settings.bucket, prefix=self.prefix or None, **kwargs)

    def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from obstore import exceptions as ox

        try:
            return fn(self._store, *args, **kwargs)
        except (ox.NotFoundError, FileNotFoundError):
            raise ObjectMissingError(
                f"object {key} is not in bucket {self.settings.bucket}"
            ) from None
        except (ox.PermissionDeniedError, ox.UnauthenticatedError, ox.InvalidPathError) as exc:
            raise TierError(f"S3 {what} {key}: {exc}") from None
        except (ox.BaseError, OSError) as exc:  # connection refused, timeouts, 5xx
            raise TierUnavailableError(f"S3 {what} {key}: {_first_line(exc)}") from None

    def put(self, key: str, data: bytes) -> ObjectInfo:
        import obstore

        r = self._call("put", key, obstore.put, key, data)
        etag = str(r.get("e_tag") or "").strip('"')
        return ObjectInfo(key, len(data), etag, int(time.time() * 1000))

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        import obstore

        def fetch(store: Any) -> bytes:
            if start or end is not None:
                opts: Any = {"range": {"offset": start}} if end is None else {"range": (start, end)}
                try:
                    return bytes(obstore.get(store, key, options=opts).bytes())
                except Exception as exc:
                    # 416: the range starts past the object's end; as a file read, that is
                    # no bytes (the caller's length check sees the object is shorter)
                    if "416" in str(exc):
                        return b""
                    raise
            return bytes(obstore.get(store, key).bytes())

        data: bytes = self._call("get", key, fetch)
        return data

    def head(self, key: str) -> ObjectInfo | None:
        import obstore

        try:
            m = self._call("head", key, obstore.head, key)
        except ObjectMissingError:
            return None
        return _info(m, key)

    def delete(self, key: str) -> None:
        import obstore

        with contextlib.suppress(ObjectMissingError):  # already gone: fine
            self._call("delete", key, obstore.delete, key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        import obstore

        def listing(store: Any) -> list[ObjectInfo]:
            return [
                _info(m, m["path"])
                for chunk in obstore.list(store, prefix=prefix or None)
                for m in chunk
                if m["path"].startswith(prefix)
            ]

        out: list[ObjectInfo] = self._call("list", prefix, listing)
        return iter(sorted(out, key=lambda o: o.key))

    def describe(self) -> dict[str, str]:
        s = self.settings
        return {
            "backend": "s3",
            "endpoint": s.endpoint,
            "bucket": s.bucket,
            "prefix": self.prefix,
            "region": s.region,
        }


def _info(m: Any, key: str) -> ObjectInfo:
    return ObjectInfo(
        key,
        int(m["size"]),
        str(m.get("e_tag") or "").strip('"'),
        int(m["last_modified"].timestamp() * 1000),
    )


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def open_storage(
    backend: str, *, local_dir: str | os.PathLike[str] | None = None, s3: S3Settings | None = None
) -> RemoteStorage:
    """The back end a configuration names ("local" with its directory, or "s3")."""
    if backend == "local":
        if local_dir is None:
            raise TierError("the local tier needs a directory")
        return LocalDirStorage(local_dir)
    if backend == "s3":
        if s3 is None or not s3.bucket:
            raise TierError("the S3 tier needs a bucket")
        return S3Storage(s3)
    raise TierError(f"unknown tier backend {backend!r}: expected 'local' or 's3'")
