"""The Kafka front's compiled record codec (`_records.c`, built by pip through setup.py),
loaded and checked (`weir.compiled`).

There is no pure-Python fallback: the C code is what the front runs, so a missing
extension or one built from an older `_records.c` stops the front with a message that
says what to do.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from weir import compiled
from weir.compiled import REBUILD, CompiledCodecError

MODULE = "weir.protocols.kafka._records"
SOURCE = Path(__file__).with_name("_records.c")


def check(module: ModuleType, source: Path = SOURCE) -> ModuleType:
    """``module`` if it was built from ``source`` (or ``source`` is not there to compare)."""
    return compiled.check(module, source)


def load(name: str = MODULE, source: Path = SOURCE) -> ModuleType:
    """Import and check the compiled codec; `CompiledCodecError` says how to rebuild it."""
    return compiled.load(name, source, "the Kafka front's compiled record codec")


load()
# typed by _records.pyi; imported only once `load` has checked the build
from weir.protocols.kafka._records import build_records, parse_records  # noqa: E402

__all__ = ["REBUILD", "CompiledCodecError", "build_records", "check", "load", "parse_records"]
