"""Batches arriving from a client: checked whole before any partition sees them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from weir.errors import BatchFormatError
from weir.storage.batch import (
    FLAG_CONTROL,
    BatchHeader,
    check_data_codec,
    check_headers,
    decode_payload,
    parse_header,
    verify_body,
)

if TYPE_CHECKING:
    from weir.storage.tiered.payloads import PayloadRef


@dataclass(slots=True)
class IncomingBatch:
    """A validated batch waiting to be written (``buf`` holds exactly one batch)."""

    buf: bytes | memoryview
    header: BatchHeader
    # records whose data the broker stored as objects of their own (large payloads)
    refs: tuple[PayloadRef, ...] = ()


def validate_incoming(buffers: Iterable[bytes | memoryview]) -> list[IncomingBatch]:
    """Parse and fully check client batches (header, CRCs, column structure, record headers)."""
    out = []
    for buf in buffers:
        h = parse_header(buf)
        if h.length != len(buf):
            raise BatchFormatError(f"batch is {len(buf)} bytes, header says {h.length}")
        if h.flags & FLAG_CONTROL:
            raise BatchFormatError("a client may not write a control batch (a transaction marker)")
        verify_body(buf, 0, h)
        payload = decode_payload(buf, 0, h)
        check_headers(payload)  # what is stored, every reader must decode
        check_data_codec(payload)
        out.append(IncomingBatch(buf, h))
    return out
