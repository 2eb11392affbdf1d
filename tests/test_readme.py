"""Every page's examples, run as a newcomer runs them: in order, on one server, twice.

A reader follows README.md (the tour, the SDK, the `ydb` SDK, the example
producer), then the docs, all against the one server `make serve` started, and
may well run a step again. So the examples must not collide (a topic name one
page creates with one shape and another page expects with another) and must
run again without an error and with a result the page explains.

CHAIN lists every runnable block (see tests/doc_blocks.py) in reading order. The
Spark snippets of docs/spark.md are checked here for what they need from the
server (the topics they name exist by then); tests/spark/test_docs.py runs them
in the Spark session the Spark tests share, and tests/spark/test_examples.py runs
the README's pipeline (orders_pipeline.py, orders_report.py): no Spark starts here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import Weir
from tests.client.test_routing import pulsar_partition
from tests.conftest import ROOT, ServerProcess
from tests.doc_blocks import PAGES, Block, block, blocks, console_steps, lines
from weir.client.sync import Client

CHAIN: list[tuple[str, str]] = [
    ("README.md", "tour"),
    ("README.md", "readme-sdk"),
    ("README.md", "readme-ydb"),
    ("README.md", "readme-pulsar"),
    ("README.md", "readme-kafka"),
    ("README.md", "readme-spark"),
    ("docs/cli.md", "cli-topics"),
    ("docs/sdk.md", "sdk-tour"),
    ("docs/producers.md", "producers-tour"),
    ("docs/subscriptions.md", "subscriptions-tour"),
    ("docs/transactions.md", "transactions-ctp"),
    ("docs/transactions.md", "transactions-kafka"),
    ("docs/ydb.md", "ydb-sdk"),
    ("docs/topics.md", "topics-cli"),
    ("docs/topics.md", "topics-sdk"),
    ("docs/topics.md", "topics-non-persistent"),
    ("docs/topics.md", "topics-compaction"),
    ("docs/spark.md", "spark-setup"),
    ("docs/spark.md", "spark-topics"),
    ("docs/spark.md", "spark-read"),
    ("docs/spark.md", "spark-write"),
    # needs ZooKeeper and bookies, not a weir server: tests/replication/test_docs.py runs it
    ("docs/replication.md", "replication-ledger"),
    # tests/tiered/test_docs.py runs it (and checks the objects it leaves in the tier)
    ("docs/tiered-storage.md", "tier-example"),
    # docs/security.md needs a server with TLS on: tests/security/test_docs.py runs them
    ("docs/security.md", "security-certs"),
    ("docs/security.md", "security-serve"),
    ("docs/security.md", "security-cli"),
    ("docs/security.md", "security-sdk"),
]

# Python blocks that are not programs, and why.
ILLUSTRATIONS = {
    ("docs/observability.md", "log.info("): "one line of server code",
    ("docs/spark.md", "totals.writeStream"): (
        "needs a streaming DataFrame; tests/spark/test_examples.py runs the examples' "
        "pipeline, which writes one into a topic"
    ),
    ("docs/tiered-storage.md", "weir.spark.read(spark"): (
        "needs a SparkSession and an offloaded topic; tests/spark/test_tier.py reads "
        "one that way and compares the rows with the SDK's"
    ),
}

_PULSAR_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ [A-Z]+ ")
SMALL_ORDERS = 300  # the README's producer writes 50,000; the same script, smaller
SPARK_SCRIPTS = ["examples/orders_pipeline.py", "examples/orders_report.py"]


def test_every_runnable_block_is_in_the_chain() -> None:
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    assert on_disk <= set(PAGES), f"add the new page to tests/doc_blocks.py: {on_disk}"
    found = [b for page in PAGES for b in blocks(page)]
    named = [(b.page, b.name) for b in found if b.name]
    assert sorted(named) == sorted(CHAIN), "a runnable block is missing from CHAIN, or gone"
    for b in found:
        if b.lang == "python" and not b.name:
            assert any(p == b.page and s in b.code for p, s in ILLUSTRATIONS), (
                f"{b.page}: a python block that nothing runs; name it (```python NAME) and "
                f"add it to CHAIN, or list it in ILLUSTRATIONS:\n{b.code}"
            )


class Reader:
    """One newcomer at one server: runs the pages' blocks and keeps what they printed."""

    def __init__(self, server: ServerProcess, work: Path) -> None:
        self.endpoint = server.endpoint
        self.pulsar_url = server.pulsar_url
        self.kafka = server.kafka
        self.weir = Weir(server.endpoint)
        self.work = work

    def console(self, b: Block) -> list[tuple[str, str, str]]:
        """(command, the output the page shows, what it printed); every command must succeed."""
        done = []
        for command, shown in console_steps(b):
            result = self.weir.shell(command)
            assert result.code == 0, f"{b.page} {b.name}: {command}\n{result.err}"
            done.append((command, shown, result.text + result.err))
        return done

    def python(self, b: Block) -> list[str]:
        code = (
            b.code.replace("127.0.0.1:2136", self.endpoint)
            .replace("pulsar://127.0.0.1:6650", self.pulsar_url)
            .replace("127.0.0.1:9092", self.kafka)
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.work,
        )
        assert out.returncode == 0, f"{b.page} {b.name}:\n{out.stderr[-3000:]}"
        return out.stdout.splitlines()

    def producer(self, b: Block) -> str:
        """The README's producer line, at a small size; the Spark lines are another test's."""
        commands = [line.split() for line in b.code.splitlines() if line.strip()]
        assert [c[1] for c in commands[1:]] == SPARK_SCRIPTS
        command = commands[0]
        assert command[:2] == [".venv/bin/python", "examples/orders_producer.py"], command
        args = [sys.executable, str(ROOT / command[1]), *command[2:]]
        args[args.index("--orders") + 1] = str(SMALL_ORDERS)
        out = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.work,
            env=self.weir.env(),  # WEIR_ENDPOINT, as a user would set it
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    def spark_needs(self, b: Block, client: Client) -> None:
        """The topics a Spark snippet reads or writes exist at this point of the chain."""
        names = re.findall(r'\.option\("topic", "([^"]+)"\)', b.code)
        for name in ",".join(names).split(","):
            if name:
                client.describe_topic(name)  # UnknownTopicError: a step is missing


def _shown_lines_printed(steps: list[tuple[str, str, str]]) -> None:
    for command, shown, printed in steps:
        for line in lines(shown):
            assert line in lines(printed), f"{command}: {line!r} not in\n{printed}"


def _messages(client: Client, topic: str) -> list[int]:
    return [p.end_offset - p.start_offset for p in client.describe_topic(topic).partition_info]


@pytest.mark.timeout(900)  # about 60 commands and programs, each allowed 120 s
def test_every_page_runs_in_order_on_one_server_and_again(
    server: ServerProcess, tmp_path: Path
) -> None:
    reader = Reader(server, tmp_path)
    client = Client(server.endpoint)
    try:
        for run in (1, 2):
            # README: the tour. The first run prints what the README shows; a second
            # finds the topic, appends two messages, and the consumer reads those.
            tour = reader.console(block("README.md", "tour"))
            if run == 1:
                _shown_lines_printed(tour)
                reads = [(c, s, p) for c, s, p in tour if c.startswith("weir read")]
                for command, shown, printed in reads:
                    assert lines(printed) == lines(shown), command
            else:
                assert "topic events already exists with 2 partitions" in tour[0][2]
                assert "partition 0, offsets 2..3" in tour[1][2]
                assert lines(tour[3][2]) == ["hello"] and lines(tour[5][2]) == ["world"]

            # README: the SDK. Keys spread by their murmur3 hash, as Pulsar's client does.
            sdk = reader.python(block("README.md", "readme-sdk"))
            partition, offset, seq_no = map(int, sdk[0].split())
            home = pulsar_partition("user-0", 4)
            per_run = [
                100 * sum(pulsar_partition(f"user-{k}", 4) == p for k in range(10)) + (p == home)
                for p in range(4)
            ]
            assert partition == home
            assert (offset, seq_no) == (per_run[home] * run - 1, per_run[home] * run)
            assert sdk[-1] == "0"  # the consumer's lag
            counts = _messages(client, "payments")
            assert counts == [n * run for n in per_run], counts

            # README: the ydb SDK, its own topic; the consumer reads the new messages.
            assert reader.python(block("README.md", "readme-ydb")) == ["page=/home", "page=/cart"]

            # README: a Pulsar client on the same topic; its subscription reads the new ones.
            # (pulsar-client logs to stdout; two partitions: any order across them)
            printed = reader.python(block("README.md", "readme-pulsar"))
            printed = [x for x in printed if not _PULSAR_LOG.match(x)]
            assert sorted(printed[:2]) == ["page=/cart", "page=/home"]
            assert printed[2:] == ["cart=3 items {'source': 'pulsar'} user-7"]

            # README: a Kafka producer and consumer group on the Pulsar client's topic; the
            # group's commit leaves the next run the two new messages.
            assert reader.python(block("README.md", "readme-kafka")) == [
                "cart=1 item user-9 {'source': 'kafka'}",
                "cart=3 items user-7 {'source': 'pulsar'}",
            ]

            # README: the example producer. A rerun stores nothing twice.
            produced = reader.producer(block("README.md", "readme-spark"))
            new = SMALL_ORDERS if run == 1 else 0
            assert f"wrote {new:,} orders" in produced, produced
            assert sum(_messages(client, "orders")) == SMALL_ORDERS
            assert client.describe_topic("orders").partitions == 4

            # docs/cli.md: the topic commands, on a topic of their own (dropped at the end).
            _shown_lines_printed(reader.console(block("docs/cli.md", "cli-topics")))

            # docs/sdk.md: a partition writer with a generated producer id, an exact range.
            sdk_page = reader.python(block("docs/sdk.md", "sdk-tour"))
            assert sdk_page == ["True", "[b'event 10', b'event 11', b'event 12']"]
            assert sum(_messages(client, "sdk-events")) == 100 * run

            # docs/producers.md: keys by hash, an exclusive producer, fencing.
            assert reader.python(block("docs/producers.md", "producers-tour")) == [
                "[1, 2]",
                "refused: topic 'accounts' has the exclusive producer 'owner'",
                "owner fenced",
            ]
            assert sum(_messages(client, "accounts")) == 2 * run
            # docs/subscriptions.md: two Shared workers, one negative ack, nothing left over.
            tour = reader.python(block("docs/subscriptions.md", "subscriptions-tour"))
            assert tour == ["[b'job 3']", "0"], tour
            assert sum(_messages(client, "jobs")) == 10 * run

            # docs/transactions.md: consume-transform-produce; each run shouts its three words
            # once (the job's offsets moved with its transactions), never the aborted one.
            shouted = reader.python(block("docs/transactions.md", "transactions-ctp"))
            assert shouted == ["[b'ALPHA', b'BETA', b'GAMMA']"], shouted
            assert client.describe_consumer("words", "shouter").lag == 0
            # the same job with confluent-kafka's transactional producer
            kafka_job = reader.python(block("docs/transactions.md", "transactions-kafka"))
            assert kafka_job == ["[b'ALPHA', b'BETA', b'GAMMA']"], kafka_job
            assert client.describe_consumer("kwords", "kshouter").lag == 0

            # docs/ydb.md: its own topic too.
            assert reader.python(block("docs/ydb.md", "ydb-sdk")) == []
            assert sum(_messages(client, "shipments")) == run
            assert client.describe_consumer("shipments", "billing").lag == 0

            # docs/topics.md: a tenant, a namespace and its policies; a rerun finds them.
            named = reader.console(block("docs/topics.md", "topics-cli"))
            if run == 1:
                _shown_lines_printed(named)
            else:
                assert [p for _, _, p in named[:3]] == [
                    "tenant acme already exists\n",
                    "namespace acme/shop already exists\n",
                    "topic acme/shop/orders already exists with 2 partitions, retention 3d\n",
                ]
                _shown_lines_printed(named[3:])
            assert (
                client.describe_topic("acme/shop/orders").effective_policies["deduplication"]
                is False
            )
            assert reader.python(block("docs/topics.md", "topics-sdk")) == [
                "3 86400000 {}",
                "3600000 {'retention_ms': 3600000}",
                "86400000",
                "['acme/sensors', 'acme/shop']",
                "True",
            ]
            assert reader.python(block("docs/topics.md", "topics-non-persistent")) == [
                "b'tick 1'",
                "non-persistent 0",
            ]
            assert reader.python(block("docs/topics.md", "topics-compaction")) == [
                "2 1",
                "[('AAPL', '191'), ('GOOG', '140'), ('MSFT', '')]",
            ]

            # docs/spark.md: the topics its snippets name, then the snippets' needs.
            spark_topics = reader.console(block("docs/spark.md", "spark-topics"))
            if run == 1:
                _shown_lines_printed(spark_topics)
            else:
                assert all("already exists" in printed for _, _, printed in spark_topics)
            for name in ("spark-setup", "spark-read", "spark-write"):
                b = block("docs/spark.md", name)
                compile(b.code, f"{b.page}:{name}", "exec")
                reader.spark_needs(b, client)
    finally:
        client.close()


def test_the_example_producer_checks_the_topic_before_writing(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An `orders` of another shape (the old tour made one with 2 partitions) is refused."""
    client = Client(server.endpoint)
    try:
        client.create_topic("orders", partitions=2)
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "orders_producer.py"), "--orders", "500"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=Weir(server.endpoint).env(),
        )
        assert out.returncode != 0
        assert "error: topic 'orders' already exists with 2 partitions, not 4" in out.stderr
        assert "Traceback" not in out.stderr, out.stderr
        assert client.describe_topic("orders").messages == 0  # nothing was written
    finally:
        client.close()
