"""The Makefile on a machine whose `python3` is not 3.11, and one name for the data dir.

The Makefile is copied into a temporary directory and run with a PATH holding
only a fake `python3` that behaves like a 3.12 (it is not 3.11, makes a venv,
and pip refuses weir there, as the real one does: "requires a different
Python"), plus, in one case, the real 3.11 as `python3.11`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from weir.config import KEYS

MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")

FAKE_312 = """#!/bin/sh
# python3 as a 3.12 shows itself to the Makefile
case "$1" in
  -c) exit 1 ;;  # the version check: not 3.11
  -m)
    if [ "$2" = venv ]; then
      mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
    fi
    case "$*" in
      *"-e ."*) echo "ERROR: Package 'weir' requires a different Python: 3.12.3 not in '>=3.11,<3.12'" >&2; exit 1 ;;
    esac
    exit 0 ;;
esac
exit 1
"""


def _project(tmp_path: Path, with_311: bool) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "Makefile", project)
    shutil.copy(ROOT / "pyproject.toml", project)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(FAKE_312)
    fake.chmod(0o755)
    for tool in ("rm", "mkdir", "cp", "touch"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    if with_311:
        (bin_dir / "python3.11").symlink_to(sys.executable)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    return project, env


def _make(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "--no-print-directory", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_python_311_make_says_so_and_leaves_no_venv(tmp_path: Path) -> None:
    project, env = _project(tmp_path, with_311=False)
    for _ in range(2):  # and the same again: nothing stale in the way
        done = _make(project, env, "install")
        assert done.returncode != 0
        assert "weir needs Python 3.11" in done.stderr and "PYTHON=" in done.stderr, done.stderr
        assert not (project / ".venv").exists(), done.stdout + done.stderr


def test_a_venv_of_another_python_is_made_again(tmp_path: Path) -> None:
    project, env = _project(tmp_path, with_311=False)
    venv_bin = project / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    shutil.copy(tmp_path / "bin" / "python3", venv_bin / "python")  # left by an older make
    done = _make(project, env, "install")
    assert done.returncode != 0
    assert "runs another Python than 3.11" in done.stderr, done.stderr
    assert not (project / ".venv").exists()


def test_python311_is_found_next_to_a_newer_python3(tmp_path: Path) -> None:
    project, env = _project(tmp_path, with_311=True)
    planned = _make(project, env, "-n", "install")
    assert planned.returncode == 0, planned.stderr
    assert "python3.11 -m venv .venv" in planned.stdout, planned.stdout


def test_one_data_directory_name_everywhere() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (data,) = re.findall(r"^WEIR_DATA\s*\?=\s*(\S+)", makefile, re.M)
    default = next(k.default for k in KEYS if k.path == "server.data_dir")
    assert Path(data) == Path(default) == Path("weir-data")
    assert f"data in {data}" in makefile  # the header
    for page in ("README.md", "docs/cli.md", "docs/configuration.md"):
        text = (ROOT / page).read_text()
        assert "./data" not in text and '"data"' not in text, page
