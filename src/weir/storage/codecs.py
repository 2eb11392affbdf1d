"""Compression codecs of the batch format.

The numbering follows the YDB Topic API (RAW=1, GZIP=2, LZOP=3, ZSTD=4) with
LZ4 at 5, so a codec id travels unchanged between the YDB front, storage and the
native protocol. Decompression is bounded by the declared size so a hostile batch
cannot expand into unbounded memory.

Besides the codecs weir runs, a message's data may carry a codec weir only
records (`is_opaque`): YDB's LZOP and the API's user-defined ids 10000-19999,
which the ydb SDK encodes and decodes itself. Their data is stored as written and
served with its codec id; weir never decodes it.
"""

from __future__ import annotations

import enum
import zlib

import lz4.block
import zstandard

from weir.errors import BadRequestError, BatchFormatError


class Codec(enum.IntEnum):
    RAW = 1
    GZIP = 2
    ZSTD = 4
    LZ4 = 5

    @classmethod
    def parse(cls, value: str | int | Codec) -> Codec:
        """Accept a Codec, its id, or its name in any case ("gzip", "RAW")."""
        if isinstance(value, Codec):
            return value
        try:
            if isinstance(value, int):
                return cls(value)
            return cls[value.strip().upper()]
        except (KeyError, ValueError):
            names = ", ".join(c.name.lower() for c in cls)
            raise BadRequestError(f"unknown codec {value!r}; expected one of {names}") from None


LZOP = 3  # the YDB API's id; no codec of weir's
CUSTOM_CODECS = range(10000, 20000)  # the YDB API's user-defined codec ids
_FIRST_CUSTOM, _END_CUSTOM = CUSTOM_CODECS.start, CUSTOM_CODECS.stop
_CUSTOM_PREFIX = "custom-"


def is_opaque(codec: int) -> bool:
    """A per-message codec weir stores and serves as written but cannot decode."""
    # comparisons, not `in range`: for an int subclass (a Codec) that scans the range
    return codec == LZOP or _FIRST_CUSTOM <= codec < _END_CUSTOM


def codec_name(codec: int) -> str:
    """The name of a codec id: "raw", "gzip", "zstd", "lz4", "lzop" or "custom-10001"."""
    if _FIRST_CUSTOM <= codec < _END_CUSTOM:
        return f"{_CUSTOM_PREFIX}{codec}"
    if codec == LZOP:
        return "lzop"
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"unknown-{codec}"


def codec_id(value: str | int) -> int:
    """A topic codec given by name or id: weir's own, "lzop", or "custom-N" / N in 10000-19999."""
    if isinstance(value, Codec):
        return int(value)
    if isinstance(value, str):
        name = value.strip().lower()
        if name == "lzop":
            return LZOP
        number = name.removeprefix(_CUSTOM_PREFIX)
        if number != name and number.isdigit() and _FIRST_CUSTOM <= int(number) < _END_CUSTOM:
            return int(number)
    elif isinstance(value, int) and is_opaque(value):
        return value
    try:
        return int(Codec.parse(value))
    except BadRequestError:
        raise BadRequestError(
            f"unknown codec {value!r}; expected raw, gzip, zstd, lz4, lzop "
            f"or custom-N with N in {CUSTOM_CODECS.start}..{CUSTOM_CODECS.stop - 1}"
        ) from None


_zstd_c = zstandard.ZstdCompressor(level=3)
_zstd_d = zstandard.ZstdDecompressor()


def compress(codec: Codec, data: bytes | bytearray | memoryview) -> bytes:
    if codec == Codec.RAW:
        return bytes(data)
    if codec == Codec.GZIP:
        # A gzip stream (with header), as the YDB SDK writes per message.
        co = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return co.compress(data) + co.flush()
    if codec == Codec.ZSTD:
        return bytes(_zstd_c.compress(data))
    if codec == Codec.LZ4:
        return bytes(lz4.block.compress(data, store_size=False))
    raise BadRequestError(f"unsupported codec {codec!r}")


def decompress(codec: Codec | int, data: bytes | memoryview, size: int) -> bytes:
    """Decompress to exactly ``size`` bytes or raise BatchFormatError."""
    try:
        if codec == Codec.RAW:
            out = bytes(data)
        elif codec == Codec.GZIP:
            do = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = do.decompress(data, size + 1)
        elif codec == Codec.ZSTD:
            out = _zstd_d.decompress(data, max_output_size=size + 1)
        elif codec == Codec.LZ4:
            out = lz4.block.decompress(data, uncompressed_size=size)
        else:
            raise BatchFormatError(f"unknown codec id {int(codec)}")
    except BatchFormatError:
        raise
    except Exception as exc:  # zlib.error, zstd.ZstdError, lz4 errors
        raise BatchFormatError(f"cannot decompress {Codec(codec).name} data: {exc}") from None
    if len(out) != size:
        raise BatchFormatError(
            f"{Codec(codec).name} data decompressed to {len(out)} bytes, header says {size}"
        )
    return out


def decompress_message(codec: int, data: bytes | memoryview) -> bytes:
    """The data of one message whose batch says each message is compressed (``data_codec``,
    written through the YDB front: a gzip stream or a zstd frame per message, the size not
    recorded). BatchFormatError when the data does not decompress. LZ4 is a batch codec
    only (no YDB writer sends it per message); opaque codecs are the caller's business."""
    try:
        if codec == Codec.RAW:
            return bytes(data)
        if codec == Codec.GZIP:
            return zlib.decompress(data, 16 + zlib.MAX_WBITS)
        if codec == Codec.ZSTD:
            return bytes(_zstd_d.decompressobj().decompress(data))
    except Exception as exc:  # zlib.error, zstd.ZstdError
        raise BatchFormatError(
            f"cannot decompress {Codec(codec).name} message data: {exc}"
        ) from None
    raise BatchFormatError(f"codec {codec} ({codec_name(codec)}) is not a per-message codec")
