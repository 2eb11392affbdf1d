"""How `make test` splits the tests between pytest-xdist workers (tests/conftest.py hooks).

A group runs whole on one worker:

- "spark": the tests of tests/spark, which share the one SparkSession (and the weir
  server it reads); tests/spark/test_examples.py starts Spark applications of its own,
  as a user runs them, so it is a group of its own;
- "replication": the tests that share one ZooKeeper (a JVM), not one per worker
  (tests/replication and tests/cluster);
- any other test: its module, so that a module-scoped server starts once.

The groups start in the order of FIRST (the longest first), then in file order, so
that the short modules fill in around the long ones.

xdist's own ``--dist loadgroup`` would do this with ``xdist_group`` marks, but with
pytest 9 it no longer tells the groups apart (it renames a test through a field pytest
no longer reads), so the groups are made here from the test ids.
"""

from __future__ import annotations

from typing import Any

SPARK_EXAMPLES = "tests/spark/test_examples.py"

FIRST = [
    "spark",
    SPARK_EXAMPLES,
    "tests/test_readme.py",
    "tests/reliability/test_faults.py",
    "tests/security/test_tls.py",
    "tests/security/test_native_auth.py",
    "tests/ydb/test_durability.py",
    "tests/client/test_writer.py",
    "replication",
]


def group_of(nodeid: str) -> str:
    """The group of the test ``nodeid`` (see the module's doc)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/spark/") and path != SPARK_EXAMPLES:
        return "spark"
    if path.startswith(("tests/replication/", "tests/cluster/")):
        return "replication"
    return path


def rank(nodeid: str) -> int:
    """Where the test's group comes in the run: FIRST's order, then all the others."""
    group = group_of(nodeid)
    return FIRST.index(group) if group in FIRST else len(FIRST)


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's load-by-scope scheduling, with the groups above as the scopes."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # the order of the collection (FIRST first)
    return GroupScheduling(config, log)
