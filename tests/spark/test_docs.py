"""docs/spark.md's snippets, run as written (endpoint aside) in the Spark tests' session.

tests/test_readme.py runs every page in order on one server without starting Spark;
this runs the Spark page itself after what it needs from the README (the example
producer's `orders`), and then again, as a reader trying it twice would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import Weir
from tests.conftest import ROOT, ServerProcess
from tests.doc_blocks import block, console_steps

ORDERS = 300


def _count(client: Any, topic: str) -> int:
    return int(client.describe_topic(topic).messages)


def test_the_spark_page_runs_as_written(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    import weir

    weir_cli = Weir(server.endpoint)
    produced = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "orders_producer.py"), "--orders", str(ORDERS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=weir_cli.env(),
    )
    assert produced.returncode == 0, produced.stderr
    with weir.Client(server.endpoint) as client:
        for _ in range(2):
            for command, _shown in console_steps(block("docs/spark.md", "spark-topics")):
                result = weir_cli.shell(command)
                assert result.code == 0, f"{command}\n{result.err}"
            namespace: dict[str, Any] = {}
            for name in ("spark-setup", "spark-read", "spark-write"):
                code = block("docs/spark.md", name).code.replace("127.0.0.1:2136", server.endpoint)
                exec(compile(code, f"docs/spark.md:{name}", "exec"), namespace)
            assert namespace["spark"] is spark  # getOrCreate: the session already running
            assert namespace["stream"].isStreaming
            # every order copied; the second run (same writeId) writes nothing twice
            assert _count(client, "orders-copy") == ORDERS
