"""The `weir` data source: the one class Spark knows, handing out readers and writers.

The readers and writers (and with them the SDK, gRPC, pyarrow.compute) are imported when
one is asked for: Spark unpickles this class in a Python worker just to ask its schema
(`format("weir").load()`), and a fresh worker would otherwise spend about 0.3 CPU s
importing what that never uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from weir.errors import BadRequestError
from weir.spark.schema import SCHEMA

if TYPE_CHECKING:
    from weir.spark.batch_reader import WeirBatchReader
    from weir.spark.stream_reader import WeirStreamReader
    from weir.spark.writer import WeirBatchWriter, WeirStreamWriter

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def _check_schema(schema: StructType) -> None:
    if schema != SCHEMA:
        raise BadRequestError(
            f"a weir topic has a fixed schema ({SCHEMA.simpleString()}); "
            f"do not pass .schema(...) (got {schema.simpleString()})"
        )


class WeirDataSource(DataSource):
    """`format("weir")`: topics as batch and streaming DataFrames, and an exactly-once sink."""

    @classmethod
    def name(cls) -> str:
        return "weir"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> WeirBatchReader:
        from weir.spark.batch_reader import WeirBatchReader, WeirFilteringBatchReader
        from weir.spark.options import ReaderOptions

        _check_schema(schema)
        options = ReaderOptions.parse(self.options, streaming=False)
        if options.push_filters:
            return WeirFilteringBatchReader(options)
        return WeirBatchReader(options)

    def streamReader(self, schema: StructType) -> WeirStreamReader:
        from weir.spark.options import ReaderOptions
        from weir.spark.stream_reader import WeirStreamReader

        _check_schema(schema)
        return WeirStreamReader(ReaderOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> WeirBatchWriter:
        from weir.spark.options import WriterOptions
        from weir.spark.writer import WeirBatchWriter

        return WeirBatchWriter(WriterOptions.parse(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> WeirStreamWriter:
        from weir.spark.options import WriterOptions
        from weir.spark.writer import WeirStreamWriter

        return WeirStreamWriter(WriterOptions.parse(self.options), schema, overwrite)


def register(spark: Any, *, filter_pushdown: bool = True) -> None:
    """Make `format("weir")` available in this SparkSession.

    ``filter_pushdown`` also turns on Spark's Python filter pushdown (off by
    default in Spark 4.3), which a batch read with the option pushFilters=true
    needs: with it off, Spark refuses such a read.
    """
    if filter_pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(WeirDataSource)
