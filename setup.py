"""The one compiled part of weir, built by pip with the machine's C compiler: the Kafka
front's record codec (src/weir/protocols/kafka/_records.c; a Python loop over Kafka
records was the limit of the produce and fetch paths). Everything else is in
pyproject.toml.

The build records the SHA-256 of the C source in the module (SOURCE_SHA256), so that
weir.protocols.kafka.compiled refuses a build of an older source with a clear message
instead of running it."""

import hashlib
import sysconfig
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "src/weir/protocols/kafka/_records.c"
digest = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

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
            define_macros=[("WEIR_RECORDS_SOURCE", f'"{digest}"')],
        )
    ]
)
