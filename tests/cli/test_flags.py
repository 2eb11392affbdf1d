"""The command line as a whole: one meaning per short flag, and `weir --version`."""

from __future__ import annotations

import subprocess
import sys
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


def test_client_commands_do_not_load_the_server() -> None:
    """Every `weir` command imports the whole command line, `serve` included; the server's
    web framework and the security service (JWTs, cryptography) load only when it serves,
    or each client command would take twice as long to start."""
    code = (
        "import sys, weir.cli; "
        "print(sorted({m.split('.')[0] if not m.startswith('weir.') else m "
        "for m in sys.modules if m.startswith(('aiohttp', 'jwt', 'cryptography', "
        "'weir.security', 'weir.server', 'weir.protocols.pulsar'))}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
