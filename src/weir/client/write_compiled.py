"""The compiled common ``write()`` of the caller-driven TCP writer (`_write_fast.c`, built
by pip through setup.py), loaded if it is there and current.

Unlike the Kafka record codec, this one has a pure-Python twin: `DirectWriterCore._write_py`
is the reference the C code is tested against (tests/client/test_write_fast.py), and the
writer runs it when the extension is missing, was built from another version of
`_write_fast.c` than the one beside it (a source edited or pulled since the last
install), or ``WEIR_PURE_PYTHON_WRITE=1`` is set (A/B benchmarks, debugging)."""

from __future__ import annotations

import hashlib
import importlib
import os
import warnings
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("_write_fast.c")


def load() -> Any:
    """The ``FastWrite`` base type, or None: the Python write."""
    if os.environ.get("WEIR_PURE_PYTHON_WRITE", "") not in ("", "0"):
        return None
    try:
        _write_fast = importlib.import_module("weir.client._write_fast")
    except ImportError:
        return None
    if SOURCE.exists():
        current = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
        if getattr(_write_fast, "SOURCE_SHA256", None) != current:
            warnings.warn(
                f"{_write_fast.__file__} was built from another version of {SOURCE.name}: "
                "using the Python write(); rebuild it with `make install` "
                "(or `pip install -e .` in the checkout)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
    return _write_fast.FastWrite


FastWrite = load()
COMPILED = FastWrite is not None
