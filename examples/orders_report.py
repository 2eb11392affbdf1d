"""Batch queries over the example's topics and Parquet output.

    python examples/orders_report.py [--out orders-out]

Reads the whole `orders` topic as a DataFrame (offset ranges, no consumer),
the latest total per customer from `order-totals`, and the per-minute Parquet
files the pipeline wrote.
"""

from __future__ import annotations

from pathlib import Path

from common import ORDERS, TOTALS, arguments, local_spark
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ORDER = "order_id long, customer string, items int, amount double"
TOTAL = "customer string, orders long, amount double, last_order_at timestamp"


def main() -> None:
    ap = arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("orders-out"))
    args = ap.parse_args()
    spark = local_spark("weir-orders-report")

    def topic(name: str) -> DataFrame:
        return (
            spark.read.format("weir").option("endpoint", args.endpoint).option("topic", name).load()
        )

    orders = topic(ORDERS)
    print(f"== topic {ORDERS!r}: records per partition")
    orders.groupBy("partition").agg(
        F.count("*").alias("records"),
        F.min("offset").alias("first_offset"),
        F.max("offset").alias("last_offset"),
        F.max("written_at").alias("last_written_at"),
    ).orderBy("partition").show(truncate=False)

    print("== top 5 customers by amount, computed from the raw orders")
    (
        orders.select(F.from_json(F.col("value").cast("string"), ORDER).alias("o"))
        .groupBy("o.customer")
        .agg(F.count("*").alias("orders"), F.round(F.sum("o.amount"), 2).alias("amount"))
        .orderBy(F.desc("amount"))
        .show(5)
    )

    print(f"== the same, from the latest record per key of {TOTALS!r} (the streaming query's)")
    (
        topic(TOTALS)
        .groupBy("key")
        .agg(F.max_by("value", "offset").alias("value"))  # a key lives in one partition
        .select(F.from_json(F.col("value").cast("string"), TOTAL).alias("t"))
        .select("t.*")
        .orderBy(F.desc("amount"))
        .show(5, truncate=False)
    )

    per_minute = args.out.resolve() / "per-minute"
    if per_minute.exists():
        print("== per-minute totals in Parquet (minutes the watermark has closed)")
        pm = spark.read.parquet(str(per_minute))
        pm.groupBy("minute").agg(
            F.sum("orders").alias("orders"), F.round(F.sum("amount"), 2).alias("amount")
        ).orderBy(F.desc("minute")).show(5, truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()
