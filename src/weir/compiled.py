"""weir's compiled modules (C, built by pip through setup.py), loaded and checked.

A compiled module with no pure-Python twin is what its caller runs, so a missing build,
or one made from an older C source (a source edited or pulled after the last install),
must stop with a message that says what to do, not fail later with an odd TypeError or,
worse, run the old rules. The build records the SHA-256 of its source (setup.py); when
the source is beside the module (a checkout, an editable install) the two must match.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from types import ModuleType

REBUILD = "rebuild it: `make install` (or `pip install -e .` in the checkout)"


class CompiledCodecError(ImportError):
    """A compiled module is missing or was built from another source."""


def check(module: ModuleType, source: Path) -> ModuleType:
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


def load(name: str, source: Path, what: str) -> ModuleType:
    """Import and check ``name`` (``what`` it is, for the message); `CompiledCodecError`
    says how to rebuild it."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise CompiledCodecError(
            f"{what} {name} is not built ({exc}): {REBUILD}; it needs a C compiler and "
            "Python's headers"
        ) from exc
    return check(module, source)
