"""How every test SparkSession is made (the test process's and the child processes')."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# under `make coverage`, on the PYTHONPATH of Spark's processes (see its sitecustomize.py)
COVERAGE_SITE = Path(__file__).with_name("coverage_site")

SPARK_ENV = {
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}


def spark_conf(work: Path) -> dict[str, str]:
    """The settings of every test SparkSession (also the child processes')."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.stopTimeout": "10s",
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.local.dir": str(work / "tmp"),
        # the JVM's own temp dirs too, so that a killed Spark leaves nothing in /tmp
        "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={work / 'tmp'}",
    }
    return conf


def make_spark(work: Path, app: str, extra: dict[str, str] | None = None) -> Any:
    """A local[2, 2] SparkSession whose JVM and Python workers run in ``work/cwd``.

    Two cores, and a failed task is tried once more, as a cluster retries it
    (spark.task.maxFailures, which local mode ignores).

    Python workers put their cwd first on sys.path, so an empty directory
    keeps stray files from shadowing modules.
    """
    from pyspark.sql import SparkSession

    import weir.spark

    cwd = work / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    if os.environ.get("COVERAGE_PROCESS_CONFIG") and str(COVERAGE_SITE) not in os.environ.get(
        "PYTHONPATH", ""
    ):  # under `make coverage`: Spark's Python workers save their coverage data
        path = [str(COVERAGE_SITE), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    (work / "tmp").mkdir(exist_ok=True)
    os.environ.update(SPARK_ENV)
    old = os.getcwd()
    os.chdir(cwd)  # the JVM (and through it every worker) inherits the cwd at launch
    try:
        b = SparkSession.builder.master("local[2,2]").appName(app)
        for k, v in {**spark_conf(work), **(extra or {})}.items():
            b = b.config(k, v)
        spark = b.getOrCreate()
    finally:
        os.chdir(old)
    spark.sparkContext.setLogLevel("ERROR")
    weir.spark.register(spark)
    return spark
