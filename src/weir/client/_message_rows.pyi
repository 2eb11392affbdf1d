from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])

SOURCE_SHA256: str

def rows(
    cls: type[T],
    topic: str,
    partition: int,
    first_offset: int,
    count: int,
    seqs: int | list[int],
    created: int | list[int],
    written: int,
    producer_id: str,
    keys: list[bytes] | None,
    data: list[bytes],
    headers: list[dict[str, str]] | None,
    session: Any,
    empty_key: bytes,
    empty_headers: Mapping[str, str],
    /,
) -> Iterator[T]: ...
