"""The columns a weir topic has as a Spark DataFrame, in Spark and in Arrow terms.

Spark checks the first Arrow batch a reader yields against
``to_arrow_schema(spark_schema, timezone="UTC")`` exactly, so both forms live
here side by side and a test keeps them equal.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("created_at", TimestampType()),
        StructField("written_at", TimestampType()),
        StructField("producer_id", StringType()),
        StructField("seq_no", LongType()),
    ]
)

# The Arrow form lives with the conversion (storage also writes it, as the tier's Parquet).
from weir.storage.arrow_rows import ARROW_SCHEMA, HEADERS_TYPE, TIMESTAMP_TYPE  # noqa: E402

__all__ = ["ARROW_SCHEMA", "HEADERS_TYPE", "SCHEMA", "TIMESTAMP_TYPE"]
