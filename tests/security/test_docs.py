"""docs/security.md, run as a reader runs it: openssl makes the certificates, a server starts
with the page's settings, and the page's CLI and Python examples run against it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import Weir
from tests.conftest import ServerProcess
from tests.doc_blocks import block, console_steps, lines

PAGE = "docs/security.md"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_the_security_page_runs(tmp_path: Path) -> None:
    certs = block(PAGE, "security-certs")
    made = subprocess.run(
        ["bash", "-e", "-c", certs.code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    for name in ("ca.pem", "server.pem", "server.key", "alice.pem", "alice.key"):
        assert (tmp_path / name).is_file(), name

    # the serve line: its WEIR_* settings (relative paths: the server runs elsewhere)
    words = shlex.split(block(PAGE, "security-serve").code)
    assert words[-2:] == ["weir", "serve"], words
    env = dict(w.split("=", 1) for w in words[:-2])
    env = {k: str(tmp_path / v) for k, v in env.items()}
    srv = ServerProcess(tmp_path / "data", env=env)
    srv.start()
    try:
        assert "TLS with client certificates" in "".join(srv.log)
        weir = Weir()
        for command, shown in console_steps(block(PAGE, "security-cli")):
            command = command.replace("127.0.0.1:2136", srv.endpoint)
            proc = subprocess.run(
                ["bash", "-c", command],
                capture_output=True,
                text=True,
                env=weir.env(),
                cwd=tmp_path,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            assert proc.returncode == 0, (command, proc.stderr)
            for line in lines(shown):
                assert line in lines(proc.stdout), (command, proc.stdout)
        # without the client certificate the same command is refused
        refused = weir.shell(f"weir topic list --tls-ca {tmp_path}/ca.pem -e {srv.endpoint}")
        assert refused.code == 1 and "TLS handshake" in refused.err, refused.err

        code = block(PAGE, "security-sdk").code.replace("127.0.0.1:2136", srv.endpoint)
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.split() == ["0"]
    finally:
        srv.stop()
