"""The Pulsar binary protocol's framing: bytes to commands and back. Pure: no asyncio, no broker.

Every frame is::

    total size  u32 (big-endian; the bytes after this field)
    command size u32
    BaseCommand  (protobuf, `pulsar_api.proto`)

and a frame that carries a message (Send from a producer, Message to a consumer) goes on::

    magic        u16  0x0e01
    checksum     u32  CRC32C of everything after it
    metadata size u32
    MessageMetadata
    payload      (one message, or a batch: see `weir.protocols.pulsar.records`)

`FrameDecoder` cuts a byte stream into frames and checks each: a frame over the size
limit, a command that does not parse or lacks a required field, a message part with
the wrong magic or a checksum that does not match, all raise `ProtocolError` naming
what was wrong. A client's bad frame ends its connection (the stream cannot be
trusted after it); it never reaches the broker.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
from google.protobuf.message import DecodeError

from weir.errors import BadRequestError
from weir.protocols.pulsar import pulsar_api_pb2 as pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_HEAD = struct.Struct(">II")  # total size, command size
_MSG_HEAD = struct.Struct(">HII")  # magic, checksum, metadata size
# The smallest frame: total size covers at least the command size field.
MIN_FRAME = 4
# Pulsar's own frame limit is the max message size plus this much room for the command
# and the metadata (Commands.MESSAGE_SIZE_FRAME_PADDING).
FRAME_PADDING = 10 * 1024

Type = pb.BaseCommand.Type


class ProtocolError(BadRequestError):
    """A frame that breaks the protocol: the connection cannot go on after it."""

    code = "BAD_FRAME"


@dataclass(slots=True)
class Frame:
    """One decoded frame: its command and, for Send / Message, the message part."""

    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    payload: memoryview | None = None
    size: int = 0  # bytes of the frame on the wire


class FrameDecoder:
    """Cuts frames out of the bytes a connection receives (feed, then iterate ``frames``).

    ``max_frame`` bounds one frame (the advertised max message size plus padding): a
    size field over it is refused at once, before any of the frame is buffered.
    """

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add received bytes; the complete frames they finish, in order."""
        buf = self._buf
        buf += data
        out: list[Frame] = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (total,) = _U32.unpack_from(buf, pos)
            if total < MIN_FRAME or total > self.max_frame:
                raise ProtocolError(
                    f"frame of {total} bytes: a frame is {MIN_FRAME} to {self.max_frame} bytes"
                )
            if n - pos - 4 < total:
                break
            # a copy: the frame's views outlive the buffer, which is cut below
            out.append(decode_frame(bytes(buf[pos + 4 : pos + 4 + total])))
            pos += 4 + total
        if pos:
            del buf[:pos]
        return out


def decode_frame(body: memoryview | bytes) -> Frame:
    """One frame without its total-size field: the command, then the message part if any."""
    mv = memoryview(body)
    total = len(mv)
    if total < 4:
        raise ProtocolError(f"frame of {total} bytes has no command size")
    (cmd_size,) = _U32.unpack_from(mv, 0)
    if cmd_size == 0 or cmd_size > total - 4:
        raise ProtocolError(f"command of {cmd_size} bytes in a frame of {total}")
    cmd = parse_command(mv[4 : 4 + cmd_size])
    rest = mv[4 + cmd_size :]
    if not rest:
        return Frame(cmd, size=total + 4)
    if cmd.type not in (Type.SEND, Type.MESSAGE):
        raise ProtocolError(
            f"{Type.Name(cmd.type)} frame carries {len(rest)} bytes after its command"
        )
    metadata, payload = decode_message_part(rest)
    return Frame(cmd, metadata, payload, total + 4)


def parse_command(buf: memoryview | bytes) -> pb.BaseCommand:
    cmd = pb.BaseCommand()
    try:
        cmd.ParseFromString(buf)  # type: ignore[arg-type]  # any buffer
    except DecodeError as exc:
        raise ProtocolError(f"command is not a valid BaseCommand: {exc}") from None
    if not cmd.HasField("type"):
        raise ProtocolError("command has no type")
    if not cmd.IsInitialized():
        raise ProtocolError(
            f"{Type.Name(cmd.type)} command lacks required fields: "
            + ", ".join(cmd.FindInitializationErrors()[:5])  # type: ignore[attr-defined]
        )
    return cmd


def decode_message_part(rest: memoryview) -> tuple[pb.MessageMetadata, memoryview]:
    """(metadata, payload) of a message part; checks its magic and checksum."""
    if len(rest) >= 2 and _U16.unpack_from(rest, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        raise ProtocolError("broker entry metadata is the broker's to send, not a client's")
    if len(rest) < _MSG_HEAD.size:
        raise ProtocolError(f"message part of {len(rest)} bytes is truncated")
    magic, checksum, meta_size = _MSG_HEAD.unpack_from(rest, 0)
    if magic != MAGIC_CRC32C:
        raise ProtocolError(f"message part has magic {magic:#06x}, not {MAGIC_CRC32C:#06x}")
    if crc32c.crc32c(rest[6:]) != checksum:
        raise ProtocolError("message checksum (CRC32C) does not match: corrupt message")
    start = _MSG_HEAD.size
    if meta_size == 0 or meta_size > len(rest) - start:
        raise ProtocolError(f"message metadata of {meta_size} bytes in {len(rest) - start}")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(rest[start : start + meta_size])  # type: ignore[arg-type]
    except DecodeError as exc:
        raise ProtocolError(f"message metadata is not valid: {exc}") from None
    if not metadata.IsInitialized():
        raise ProtocolError(
            "message metadata lacks required fields: "
            + ", ".join(metadata.FindInitializationErrors()[:5])  # type: ignore[attr-defined]
        )
    return metadata, rest[start + meta_size :]


# ---------------------------------------------------------------------------- encoding


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """A frame holding ``cmd`` alone."""
    body = cmd.SerializeToString()
    return _HEAD.pack(len(body) + 4, len(body)) + body


def encode_message(cmd: pb.BaseCommand, metadata: bytes, payload: bytes | memoryview) -> bytes:
    """A frame holding ``cmd`` and a message part (``metadata`` serialized already)."""
    return encode_message_with(cmd.SerializeToString(), message_part(metadata, payload))


def message_part(metadata: bytes, payload: bytes | memoryview) -> bytes:
    """magic + checksum + metadata size + metadata + payload (reusable across frames)."""
    return message_prefix(metadata, payload) + payload


def message_prefix(metadata: bytes, payload: bytes | memoryview) -> bytes:
    """What comes before ``payload`` in a message part: magic, checksum (of the rest and
    the payload), metadata size, metadata. Kept apart so that a frame copies the payload
    once, when the frame is joined."""
    head = _U32.pack(len(metadata)) + metadata
    crc = crc32c.crc32c(payload, crc32c.crc32c(head))
    return _U16.pack(MAGIC_CRC32C) + _U32.pack(crc) + head


def frame_head(command: bytes, part_size: int) -> bytes:
    """Sizes and command of a frame whose message part of ``part_size`` bytes follows."""
    return _HEAD.pack(4 + len(command) + part_size, len(command)) + command


def encode_message_with(command: bytes, part: bytes) -> bytes:
    """A frame of a serialized command and a ready message part (`message_part`)."""
    return frame_head(command, len(part)) + part
