"""FrameReader: any split of a connection's bytes gives the same frames, large ones in
buffers of their own; a bad size prefix is refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.protocols.kafka import framing
from weir.protocols.kafka.framing import BIG_FRAME, SCRATCH, FrameReader, FrameSizeError


def _feed(reader: FrameReader, data: bytes, cuts: list[int]) -> None:
    """Write ``data`` through get_buffer/buffer_updated as a transport would, in pieces
    no longer than the cuts (and than the buffer offered)."""
    pos = 0
    i = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        want = cuts[i % len(cuts)] if cuts else len(data)
        n = min(len(buf), max(1, want), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        reader.buffer_updated(n)
        pos += n
        i += 1


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(
            st.integers(0, 300), st.integers(BIG_FRAME - 8, BIG_FRAME + 8), st.integers(1, 200_000)
        ),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 3 * SCRATCH), max_size=8),
)
def test_any_split_gives_the_frames_sent(sizes: list[int], cuts: list[int]) -> None:
    frames = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    got: list[bytes] = []
    reader = FrameReader(1 << 20, lambda f: got.append(bytes(f)))
    _feed(reader, b"".join(struct.pack(">i", len(f)) + f for f in frames), cuts)
    assert got == frames


def test_a_large_frame_is_received_into_its_own_buffer() -> None:
    views: list[memoryview] = []
    reader = FrameReader(1 << 20, views.append)
    frame = b"x" * 500_000
    _feed(reader, struct.pack(">i", len(frame)) + frame, [SCRATCH])
    (v,) = views
    assert v.obj is not reader._scratch and len(v) == len(frame) == len(v.obj)  # type: ignore[arg-type]


def test_a_frame_over_a_part_comes_whole_and_memory_follows_the_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A size alone makes the reader hold one part, not the frame it announces; the parts
    are allocated as the bytes come and joined once."""
    monkeypatch.setattr(framing, "BIG_PART", 100_000)
    got: list[bytes] = []
    reader = FrameReader(100 << 20, lambda f: got.append(bytes(f)))
    _feed(reader, struct.pack(">i", 90 << 20), [])
    assert reader.held == 100_000  # not 90 MB
    frame = bytes(range(256)) * 1200  # 307,200 bytes: 4 parts
    reader = FrameReader(100 << 20, lambda f: got.append(bytes(f)))
    _feed(reader, struct.pack(">i", len(frame)) + frame + struct.pack(">i", 3) + b"abc", [70_000])
    assert got == [frame, b"abc"] and reader.held == 0


def test_an_accepted_connection_holds_no_buffer_until_bytes_come() -> None:
    """A thousand silent connections must not hold 64 KiB each."""
    got: list[bytes] = []
    reader = FrameReader(1 << 20, lambda f: got.append(bytes(f)))
    assert len(reader._scratch) == 0
    _feed(reader, struct.pack(">i", 3) + b"abc", [])
    assert got == [b"abc"] and len(reader._scratch) == framing.SCRATCH


@pytest.mark.parametrize("size", [-1, (1 << 20) + 1])
def test_a_bad_size_is_refused(size: int) -> None:
    reader = FrameReader(1 << 20, lambda f: None)
    with pytest.raises(FrameSizeError):
        _feed(reader, struct.pack(">i", size) + b"abc", [])
