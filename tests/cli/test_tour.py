"""The README's five-minute tour, run exactly as written against a fresh server.

README.md quotes `TOUR` in a fenced block opened with ```console tour: lines
starting with "$ " are typed commands, the lines after one are what it prints.
The commands must be these, in this order; every output line the README shows
must be a line the command really prints (spacing at the ends aside), and a
`weir read` must print exactly the messages shown.
"""

from __future__ import annotations

import re

from tests.cli.conftest import Weir
from tests.conftest import ROOT, ServerProcess

SERVE = "weir serve --data-dir ./weir-data"

TOUR: list[tuple[str, str]] = [
    (
        "weir topic create orders --partitions 2",
        "created topic orders with 2 partitions, retention 7d",
    ),
    (
        "printf 'hello\\nworld\\n' | weir write orders --producer-id shop-1",
        "wrote 2 messages (10 B) to orders: partition 0, offsets 0..1",
    ),
    (
        "weir read orders --format '{partition}:{offset} {value}'",
        "0:0 hello\n0:1 world",
    ),
    (
        "weir read orders --consumer billing --count 1",
        "hello",
    ),
    (
        "weir consumer describe orders billing",
        """\
consumer billing of orders
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
        "weir read orders --consumer billing",
        "world",
    ),
]


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def readme_tour() -> list[tuple[str, str]] | None:
    """(command, output) pairs of README.md's ```console tour block; None without one."""
    readme = ROOT / "README.md"
    if not readme.exists():
        return None
    m = re.search(r"```console tour\n(.*?)```", readme.read_text(), re.S)
    if m is None:
        return None
    steps: list[tuple[str, str]] = []
    for line in m.group(1).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], ""))
        elif steps:
            steps[-1] = (steps[-1][0], steps[-1][1] + line + "\n")
    return steps


def test_the_tour_runs_as_written(server: ServerProcess) -> None:
    """README's block when it has one (it must be TOUR's commands), else TOUR itself."""
    steps = readme_tour()
    if steps is not None:
        assert [c for c, _ in steps] == [c for c, _ in TOUR], "README's tour differs from TOUR"
        assert SERVE in (ROOT / "README.md").read_text()
    weir = Weir(server.endpoint)
    for command, expected in steps or TOUR:
        result = weir.shell(command)
        assert result.code == 0, f"{command}\n{result.err}"
        printed = _lines(result.text + result.err)
        for line in _lines(expected):
            assert line in printed, f"{command}: {line!r} not in\n{printed}"
        if command.startswith("weir read"):  # messages: all of them, nothing else
            assert _lines(result.text) == _lines(expected), command
