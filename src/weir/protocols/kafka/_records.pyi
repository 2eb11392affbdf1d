def parse_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    base_ts: int,
    null_header: bytes,
    room: int,
) -> tuple[bytearray, int, int, int, int]: ...
def build_records(
    payload: bytes | bytearray | memoryview,
    flags: int,
    count: int,
    created_base: int,
    null_header: bytes,
) -> tuple[bytearray, int, int]: ...

SOURCE_SHA256: str
