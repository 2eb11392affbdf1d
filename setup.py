"""The one compiled part of weir, built by pip with the machine's C compiler: the Kafka
front's record parser (src/weir/protocols/kafka/_records.c; a Python loop over Kafka
records was the produce path's limit). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "weir.protocols.kafka._records",
            ["src/weir/protocols/kafka/_records.c"],
            extra_compile_args=["-O2"],
        )
    ]
)
