"""Compression codecs of the batch format.

The numbering follows the YDB Topic API (RAW=1, GZIP=2, LZMA=3 unused, ZSTD=4)
with LZ4 at 5, so a codec id travels unchanged between the YDB front, storage
and the native protocol. Decompression is bounded by the declared size so a
hostile batch cannot expand into unbounded memory.
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
