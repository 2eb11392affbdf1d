"""Where the weir server's time goes: py-spy samples of the server during one workload.

``Profiler`` attaches ``py-spy record --format raw --nonblocking --threads`` to
the server's PID for the length of a ``with`` block; :func:`top_functions`
turns the collapsed stacks into the functions that hold the samples: *self*
(the frame on top of the stack: where the CPU is spent) and *total* (the
weir function anywhere on the stack: what the time is spent under), plus the share
of each thread (the event loop vs the group-commit thread).  py-spy leaves out
idle samples, so shares are of busy time.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import TracebackType

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    """The py-spy binary of this venv (or on PATH), None if absent."""
    local = Path(sys.executable).parent / "py-spy"
    if local.exists():
        return str(local)
    return shutil.which("py-spy")


class Profiler:
    """py-spy attached to ``pid`` while the block runs; raw collapsed stacks into ``out``."""

    def __init__(self, pid: int, out: Path, rate: int = 200) -> None:
        self.pid = pid
        self.out = out
        self.rate = rate
        self.proc: subprocess.Popen[bytes] | None = None
        self.error = ""

    def __enter__(self) -> Profiler:
        exe = py_spy()
        if exe is None:
            self.error = "py-spy not installed"
            return self
        self.out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [exe, "record", "-p", str(self.pid), "-o", str(self.out), "--format", "raw"]
        cmd += ["--rate", str(self.rate), "--nonblocking", "--threads"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=10)
        if not self.out.exists():
            self.error = (err or b"").decode(errors="replace").strip()[-500:] or "no output"


def _func(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``: one key per function."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    file = m.group("file")
    marker = "site-packages/"
    if marker in file:
        file = file.split(marker, 1)[1]
    elif "/src/" in file:
        file = file.split("/src/", 1)[1]
    return f"{m.group('func')} ({file})"


def parse_raw(path: Path) -> list[tuple[str, list[str], int]]:
    """(thread name, frames root->leaf, samples) per line of a py-spy raw file."""
    out: list[tuple[str, list[str], int]] = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = stack.split(";")
            thread = ""
            if frames and frames[0].startswith("thread ("):
                thread = frames[0].split(": ", 1)[-1]
                frames = frames[1:]
            out.append((thread, [_func(f) for f in frames], int(count)))
    return out


def top_functions(path: Path, n: int = 20) -> str:
    """A text report: samples per thread, top ``n`` functions by self and by total samples."""
    stacks = parse_raw(path)
    total = sum(c for _, _, c in stacks)
    if not total:
        return "(no samples)\n"
    threads: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    for thread, frames, c in stacks:
        threads[thread or "?"] += c
        if frames:
            self_[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
    lines = [f"{total} samples (busy only)", "", "threads:"]
    lines += [f"  {c / total:6.1%}  {t}" for t, c in threads.most_common(8)]
    lines += ["", f"top {n} by self samples (where the CPU is):"]
    lines += [f"  {c / total:6.1%}  {f}" for f, c in self_.most_common(n)]
    own = Counter({f: c for f, c in incl.items() if f.split(" (", 1)[-1].startswith("weir/")})
    lines += ["", f"top {n} weir functions by total samples (what the time is spent under):"]
    lines += [f"  {c / total:6.1%}  {f}" for f, c in own.most_common(n)]
    return "\n".join(lines) + "\n"


def top_self(path: Path, n: int = 5) -> list[tuple[str, float]]:
    """The ``n`` functions with the most self samples, as (function, share)."""
    stacks = parse_raw(path)
    total = sum(c for _, _, c in stacks)
    self_: Counter[str] = Counter()
    for _, frames, c in stacks:
        if frames:
            self_[frames[-1]] += c
    return [(f, c / total) for f, c in self_.most_common(n)] if total else []


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"== {arg}")
        print(top_functions(Path(arg)))
