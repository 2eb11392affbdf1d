"""What the example scripts share: the endpoint, topic names and a local SparkSession."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ORDERS = "orders"
TOTALS = "order-totals"
# Partitions the example expects: the producer routes customers to partitions by a
# hash of the key over this count, and the pipeline's sink does the same for totals.
PARTITIONS = {ORDERS: 4, TOTALS: 2}


def arguments(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument(
        "--endpoint",
        default=os.environ.get("WEIR_ENDPOINT", "127.0.0.1:2136"),
        help="weir server (default: $WEIR_ENDPOINT or 127.0.0.1:2136)",
    )
    return ap


def ensure_topics(endpoint: str) -> None:
    """Create the example's topics, or check the ones there are of the expected shape.

    Runs before anything is written: a topic of another shape (say an `orders`
    made by hand with 2 partitions) stops the script with a message, not with a
    half-written topic.
    """
    import weir
    from weir.errors import AlreadyExistsError

    with weir.Client(endpoint) as client:
        for name, partitions in PARTITIONS.items():
            try:
                client.create_topic(name, partitions=partitions, exist_ok=True)
            except AlreadyExistsError as err:
                sys.exit(
                    f"error: {err.message}; this example needs {name!r} with {partitions} "
                    f"partitions: drop it (weir topic drop {name}) or use another server"
                )


def local_spark(app: str) -> SparkSession:
    """A local[2] SparkSession on loopback, with `format("weir")` registered."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need pyarrow and weir
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import weir.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    weir.spark.register(spark)
    return spark
