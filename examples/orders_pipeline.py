"""The streaming pipeline: `orders` -> totals per customer -> topic `order-totals` and Parquet.

    python examples/orders_pipeline.py [--out orders-out] [--follow]

Two streaming queries read the `orders` topic:

* totals per customer (orders, amount, last order time), in complete mode,
  into the topic `order-totals` through weir's exactly-once sink: every
  micro-batch writes the current totals, so the latest record of a key is
  that customer's total;
* totals per customer and minute of event time, finalized by a watermark of
  one minute, appended to Parquet files under --out/per-minute.

Without --follow both run with trigger(availableNow=True): they read what is
in the topic now (at most 20,000 orders per micro-batch) and stop. With
--follow they keep running every 5 seconds until Ctrl-C. Either way a rerun
carries on from the checkpoints under --out/checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import ORDERS, TOTALS, arguments, ensure_topics, local_spark
from pyspark.sql import functions as F

ORDER = "order_id long, customer string, items int, amount double"


def main() -> None:
    ap = arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("orders-out"))
    ap.add_argument("--follow", action="store_true", help="keep running until Ctrl-C")
    args = ap.parse_args()
    out = args.out.resolve()
    ensure_topics(args.endpoint)  # the sink routes totals by key over 2 partitions

    spark = local_spark("weir-orders-pipeline")
    orders = (
        spark.readStream.format("weir")
        .option("endpoint", args.endpoint)
        .option("topic", ORDERS)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20000")
        .option("consumer", "orders-pipeline")  # shows the query's lag in `weir` tools
        .load()
        .select(
            F.from_json(F.col("value").cast("string"), ORDER).alias("o"),
            "created_at",
        )
        .select("o.*", "created_at")
    )

    totals = orders.groupBy("customer").agg(
        F.count("*").alias("orders"),
        F.round(F.sum("amount"), 2).alias("amount"),
        F.max("created_at").alias("last_order_at"),
    )
    to_topic = (
        totals.select(
            F.col("customer").alias("key"),
            F.to_json(F.struct("customer", "orders", "amount", "last_order_at")).alias("value"),
        )
        # a replayed micro-batch must hand each task the same rows in the same order
        .sortWithinPartitions("key")
        .writeStream.format("weir")
        .outputMode("complete")
        .option("endpoint", args.endpoint)
        .option("topic", TOTALS)
        .option("checkpointLocation", str(out / "checkpoints" / "totals"))
    )

    per_minute = (
        orders.withWatermark("created_at", "1 minute")
        .groupBy(F.window("created_at", "1 minute").alias("minute"), "customer")
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
        .select(F.col("minute.start").alias("minute"), "customer", "orders", "amount")
    )
    to_parquet = (
        per_minute.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out / "per-minute"))
        .option("checkpointLocation", str(out / "checkpoints" / "per-minute"))
    )

    queries: list[Any] = []
    for name, writer in (("totals -> topic", to_topic), ("per minute -> parquet", to_parquet)):
        if args.follow:
            writer = writer.trigger(processingTime="5 seconds")
        else:
            writer = writer.trigger(availableNow=True)
        queries.append(writer.queryName(name.split()[0].replace("per", "per_minute")).start())
        print(f"started: {name}")
    try:
        for q in queries:
            q.awaitTermination()
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            print(f"{q.name}: {len(q.recentProgress)} micro-batches, {rows:,} orders read")
    except KeyboardInterrupt:
        for q in queries:
            q.stop()
    spark.stop()
    print(f"totals in topic {TOTALS!r}; per-minute totals in {out / 'per-minute'}")


if __name__ == "__main__":
    main()
