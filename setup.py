"""The compiled parts of weir, built by pip with the machine's C compiler: the Kafka
front's record codec (src/weir/protocols/kafka/_records.c; a Python loop over Kafka
records was the limit of the produce and fetch paths), the sync TCP writer's common
write() (src/weir/client/_write_fast.c; the Python of write() capped one producer) and
the reader's Message tuples (src/weir/client/_message_rows.c; building them was most of a
Message loop).
Everything else is in pyproject.toml.

The build records the SHA-256 of each C source in its module (SOURCE_SHA256), so that
weir.protocols.kafka.compiled refuses a build of an older source with a clear message
instead of running it, and weir.client.write_compiled falls back to the Python write."""

import hashlib
import sysconfig
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "src/weir/protocols/kafka/_records.c"
WRITE_SOURCE = "src/weir/client/_write_fast.c"
ROWS_SOURCE = "src/weir/client/_message_rows.c"


def _digest(source: str) -> str:
    return hashlib.sha256((Path(__file__).parent / source).read_bytes()).hexdigest()


include = sysconfig.get_paths()["include"]
if not (Path(include) / "Python.h").exists():
    raise SystemExit(
        f"weir builds a C extension (the Kafka record codec) and needs Python's headers, "
        f"which are not in {include}: install them (Debian: apt-get install python3.11-dev) "
        "and run the install again"
    )

setup(
    ext_modules=[
        Extension(
            "weir.protocols.kafka._records",
            [SOURCE],
            extra_compile_args=["-O2"],
            define_macros=[("WEIR_RECORDS_SOURCE", f'"{_digest(SOURCE)}"')],
        ),
        Extension(
            "weir.client._write_fast",
            [WRITE_SOURCE],
            extra_compile_args=["-O2"],
            define_macros=[("WEIR_WRITE_FAST_SOURCE", f'"{_digest(WRITE_SOURCE)}"')],
        ),
        Extension(
            "weir.client._message_rows",
            [ROWS_SOURCE],
            extra_compile_args=["-O2"],
            define_macros=[("WEIR_MESSAGE_ROWS_SOURCE", f'"{_digest(ROWS_SOURCE)}"')],
        ),
    ]
)
