"""The code blocks of README.md and the docs, as the tests that run them see them.

A fenced block whose info string has a second word is runnable, and that word
names it: ```console tour, ```python readme-sdk, ```sh readme-spark. A block
with the language alone is an illustration (a fragment, a config file, output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.conftest import ROOT

# Every page a reader may follow, in the order the README lists them.
PAGES = [
    "README.md",
    "docs/cli.md",
    "docs/sdk.md",
    "docs/native-protocol.md",
    "docs/topics.md",
    "docs/producers.md",
    "docs/subscriptions.md",
    "docs/transactions.md",
    "docs/configuration.md",
    "docs/observability.md",
    "docs/console.md",
    "docs/storage.md",
    "docs/tiered-storage.md",
    "docs/ydb.md",
    "docs/pulsar.md",
    "docs/kafka.md",
    "docs/spark.md",
    "docs/performance.md",
    "docs/reliability.md",
    "docs/replication.md",
    "docs/cluster.md",
    "docs/security.md",
    "examples/README.md",
]

_FENCE = re.compile(r"^```(\w+)(?: ([\w-]+))?\n(.*?)^```\s*$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    name: str  # "" for an illustration
    code: str


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text()
    return [Block(page, m.group(1), m.group(2) or "", m.group(3)) for m in _FENCE.finditer(text)]


def block(page: str, name: str) -> Block:
    found = [b for b in blocks(page) if b.name == name]
    assert len(found) == 1, f"{page} has {len(found)} blocks named {name!r}"
    return found[0]


def console_steps(b: Block) -> list[tuple[str, str]]:
    """(command, what the page shows it prints) for each ``$ `` line of a console block."""
    steps: list[tuple[str, str]] = []
    for line in b.code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], ""))
        elif steps:
            steps[-1] = (steps[-1][0], steps[-1][1] + line + "\n")
    return steps


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]
