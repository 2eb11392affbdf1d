"""The columns a weir topic has as a Spark DataFrame, in Spark and in Arrow terms.

Spark checks the first Arrow batch a reader yields against
``to_arrow_schema(spark_schema, timezone="UTC")`` exactly, so both forms live
here side by side and a test keeps them equal.
"""

from __future__ import annotations

import pyarrow as pa
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

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("created_at", TIMESTAMP_TYPE),
        pa.field("written_at", TIMESTAMP_TYPE),
        pa.field("producer_id", pa.string()),
        pa.field("seq_no", pa.int64()),
    ]
)
