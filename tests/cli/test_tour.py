"""The README's five-minute tour, pinned: an edit to it must be an edit here too.

README.md quotes `TOUR` in a fenced block opened with ```console tour: lines
starting with "$ " are typed commands, the lines after one are what it prints.
tests/test_readme.py runs it on a fresh server with the README's other examples
and the docs', checks that every line shown is printed (and that a `weir read`
prints exactly the messages shown), then runs it all again.
"""

from __future__ import annotations

from tests.conftest import ROOT
from tests.doc_blocks import block, console_steps

SERVE = "weir serve --data-dir ./weir-data"

TOUR: list[tuple[str, str]] = [
    (
        "weir topic create events --partitions 2 --if-not-exists",
        "created topic events with 2 partitions, retention 7d",
    ),
    (
        "printf 'hello\\nworld\\n' | weir write events --producer-id shop-1",
        "wrote 2 messages (10 B) to events: partition 0, offsets 0..1",
    ),
    (
        "weir read events --format '{partition}:{offset} {value}'",
        "0:0 hello\n0:1 world",
    ),
    (
        "weir read events --consumer billing --count 1",
        "hello",
    ),
    (
        "weir consumer describe events billing",
        """\
consumer billing of events
┏━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━┳━━━━━┓
┃ partition ┃ committed ┃ end ┃ lag ┃
┡━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━╇━━━━━┩
│         0 │         1 │   2 │   1 │
│         1 │         0 │   0 │   0 │
├───────────┼───────────┼─────┼─────┤
│     total │           │     │   1 │
└───────────┴───────────┴─────┴─────┘""",
    ),
    (
        "weir read events --consumer billing",
        "world",
    ),
]


def readme_tour() -> list[tuple[str, str]]:
    """(command, output) pairs of README.md's ```console tour block."""
    return console_steps(block("README.md", "tour"))


def test_the_readme_tour_is_tour() -> None:
    """README's tour is TOUR, word for word; tests/test_readme.py runs it (twice)."""
    assert [(c, out.rstrip("\n")) for c, out in readme_tour()] == TOUR
    assert SERVE in (ROOT / "README.md").read_text()
