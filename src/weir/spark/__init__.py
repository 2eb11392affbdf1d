"""weir as a PySpark data source: `weir.spark.register(spark)`, then `format("weir")`.

See docs/spark.md for the options, the schema and the exactly-once sink.
"""

from weir.spark.schema import ARROW_SCHEMA, SCHEMA
from weir.spark.source import WeirDataSource, register

__all__ = ["ARROW_SCHEMA", "SCHEMA", "WeirDataSource", "register"]
