"""The compiled record codec is the one built from the source beside it; a stale or
missing build stops the front with a message that says how to rebuild, never runs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from weir.protocols.kafka import _records, compiled


def test_the_build_matches_its_source() -> None:
    assert hashlib.sha256(compiled.SOURCE.read_bytes()).hexdigest() == _records.SOURCE_SHA256
    assert compiled.load() is _records


def test_a_build_of_another_source_is_refused(tmp_path: Path) -> None:
    edited = tmp_path / "_records.c"
    edited.write_bytes(compiled.SOURCE.read_bytes() + b"\n/* edited after the build */\n")
    with pytest.raises(compiled.CompiledCodecError, match=r"another version.*make install"):
        compiled.load(source=edited)
    # no source beside it (an installed wheel): nothing to be stale against
    assert compiled.load(source=tmp_path / "absent.c") is _records


def test_a_missing_build_says_how_to_build_it() -> None:
    with pytest.raises(compiled.CompiledCodecError, match=r"not built.*make install"):
        compiled.load("weir.protocols.kafka._no_such_build")
