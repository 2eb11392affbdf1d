"""weir as a PySpark data source: `weir.spark.register(spark)`, then `format("weir")`;
`weir.spark.read(spark, ...)` for a batch read whose offloaded part is Spark's Parquet scan.

See docs/spark.md for the options, the schema and the exactly-once sink.
"""

try:  # the connector's dependencies come with the [spark] extra, not with `pip install weir`
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:
    raise ModuleNotFoundError(
        f"weir's Spark connector needs {exc.name or 'a package'} ({exc}), which a plain "
        "`pip install weir` does not install: pip install 'weir[spark]' "
        "(pyspark, pyarrow, numpy, pandas)",
        name=exc.name,
    ) from exc

from typing import TYPE_CHECKING, Any

from weir.spark.schema import ARROW_SCHEMA, SCHEMA
from weir.spark.source import WeirDataSource, register

if TYPE_CHECKING:
    from weir.spark.tier_files import read

__all__ = ["ARROW_SCHEMA", "SCHEMA", "WeirDataSource", "read", "register"]


def __getattr__(name: str) -> Any:
    """`read` on first use: Spark's Python workers import this package (to unpickle the
    source) and should not pay for the SDK and gRPC unless they read."""
    if name == "read":
        from weir.spark.tier_files import read

        return read
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
