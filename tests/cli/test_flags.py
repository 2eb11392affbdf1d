"""The command line as a whole: one meaning per short flag, and `weir --version`."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import typer

import weir
from tests.cli.conftest import Weir
from weir.cli import app


def _commands(cmd: Any, path: str) -> list[tuple[str, Any]]:
    """Every command under ``cmd`` (typer's own click), with the words that call it."""
    found = [(path, cmd)]
    for name, sub in getattr(cmd, "commands", {}).items():
        found += _commands(sub, f"{path} {name}")
    return found


def test_a_short_flag_means_one_thing_in_every_command() -> None:
    meanings: dict[str, set[str]] = defaultdict(set)
    where: dict[str, list[str]] = defaultdict(list)
    for path, cmd in _commands(typer.main.get_command(app), "weir"):
        for param in cmd.params:
            if param.param_type_name != "option":
                continue
            longs = [o for o in param.opts + param.secondary_opts if o.startswith("--")]
            for short in (o for o in param.opts + param.secondary_opts if not o.startswith("--")):
                meanings[short] |= set(longs[:1])
                where[short].append(f"{path} {longs[:1]}")
    clashes = {s: where[s] for s, m in meanings.items() if len(m) > 1}
    assert not clashes, clashes
    assert meanings["-c"] == {"--consumer"}  # serve and config check use --config only


def test_version() -> None:
    result = Weir()("--version")
    assert result.code == 0, result.err
    assert result.text == f"weir {weir.__version__}\n"
