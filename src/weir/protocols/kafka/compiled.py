"""The Kafka front's compiled record codec (`_records.c`, built by pip through setup.py),
loaded and checked.

There is no pure-Python fallback: the C code is what the front runs, so a missing
extension or one built from an older `_records.c` (a source edited or pulled after the
last install) must stop the front with a message that says what to do, not fail later
with an odd TypeError or, worse, parse with the old rules. The build records the SHA-256
of its source (setup.py); when the source is beside the module (a checkout, an editable
install) the two must match.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from types import ModuleType

MODULE = "weir.protocols.kafka._records"
SOURCE = Path(__file__).with_name("_records.c")
REBUILD = "rebuild it: `make install` (or `pip install -e .` in the checkout)"


class CompiledCodecError(ImportError):
    """The compiled record codec is missing or was built from another source."""


def check(module: ModuleType, source: Path = SOURCE) -> ModuleType:
    """``module`` if it was built from ``source`` (or ``source`` is not there to compare)."""
    built = getattr(module, "SOURCE_SHA256", None)
    if not source.exists():
        return module  # an installed wheel: no source to be stale against
    current = hashlib.sha256(source.read_bytes()).hexdigest()
    if built != current:
        raise CompiledCodecError(
            f"{module.__file__} was built from another version of {source.name} than the "
            f"one in {source.parent} (built {built or 'without a source hash'}, source "
            f"{current[:12]}...): {REBUILD}"
        )
    return module


def load(name: str = MODULE, source: Path = SOURCE) -> ModuleType:
    """Import and check the compiled codec; `CompiledCodecError` says how to rebuild it."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise CompiledCodecError(
            f"the Kafka front's compiled record codec {name} is not built ({exc}): {REBUILD}; "
            "it needs a C compiler and Python's headers"
        ) from exc
    return check(module, source)


load()
# typed by _records.pyi; imported only once `load` has checked the build
from weir.protocols.kafka._records import build_records, parse_records  # noqa: E402

__all__ = ["CompiledCodecError", "build_records", "check", "load", "parse_records"]
