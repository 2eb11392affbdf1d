def parse_records(
    buf: bytes | memoryview, pos: int, end: int, count: int, base_ts: int, null_header: bytes
) -> tuple[
    int,
    bytes | None,
    bool,
    bytes | None,
    bytes,
    bytes | None,
    bytes,
    bytes,
    bytes,
    int,
    int,
]: ...
