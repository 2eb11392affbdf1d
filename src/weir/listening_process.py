"""A child process that serves on a loopback port: started, awaited until it says it
listens, stopped and killed by PID. For tests, benchmarks and development clusters
(`weir.replication.local_cluster`, the tests' `weir serve`); stdlib only.

The process names its port on stderr ("... listening on HOST:PORT"), so it can bind
port 0 and the parent learns the port it got; a restart asks for that port again.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

_PR_SET_PDEATHSIG = 1
MAX_LOG_LINES = 10_000  # stderr lines kept in memory (a long-running child's log is its file)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """SIGTERM this child when the process that started it dies (Linux), so a supervisor
    killed with -9 leaves no orphan behind."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def detached_popen_args(detach: bool) -> dict[str, Any]:
    """Popen arguments for a child that a supervisor stops itself: its own session (a
    Ctrl-C at the terminal reaches the supervisor only, which stops its children in
    order) and SIGTERM when the supervisor dies."""
    if not detach:
        return {}
    preexec: Callable[[], None] = _die_with_parent
    return {"start_new_session": True, "preexec_fn": preexec}


class ListeningProcess:
    """A command as a child process, ready once stderr matches ``listening``.

    Subclasses give the command (`command`); the port it listens on is ``port``
    (0 until it first started), every stderr line is kept in ``log``.
    """

    # A signal the process answers by printing its threads' stacks (`weir serve`: SIGUSR1),
    # sent when it does not become ready in time; None: it has none.
    stack_dump_signal: int | None = None

    def __init__(
        self,
        name: str,
        listening: re.Pattern[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name  # for the error when it does not start
        self.listening = listening  # group 2 is the port
        self.env = env
        self.cwd = cwd
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []  # the last MAX_LOG_LINES (at most twice that) of stderr
        self.log_file: Path | None = None  # every stderr line is appended here too when set
        self.detach = False  # see detached_popen_args
        self._ready = threading.Event()

    def command(self) -> Sequence[str]:
        """The command line; ``self.port`` is the port to ask for (0: any)."""
        raise NotImplementedError

    def start(self, timeout: float = 60) -> Self:
        """Start it and wait until it listens; raises RuntimeError (with its last log
        lines) when it does not within ``timeout`` or exits first."""
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting (`wait_ready` waits): a supervisor starts
        several at once, each from its main thread (see detached_popen_args). One that is
        running already is an error: starting another would lose track of it (a process
        nobody stops)."""
        running = self.proc
        if running is not None and running.poll() is None:
            raise RuntimeError(f"{self.name} is running already (pid {running.pid}): stop it first")
        env = None if self.env is None else {**os.environ, **self.env}
        self.proc = subprocess.Popen(
            self.command(),
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            cwd=self.cwd,
            env=env,
            **detached_popen_args(self.detach),
        )
        ready = self._ready = threading.Event()
        proc = self.proc
        log_file = open(self.log_file, "a") if self.log_file is not None else None  # noqa: SIM115

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line)
                if len(self.log) > 2 * MAX_LOG_LINES:
                    del self.log[:MAX_LOG_LINES]
                if log_file is not None:
                    log_file.write(line)
                    log_file.flush()
                m = self.listening.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(2))
                    ready.set()
            if log_file is not None:
                log_file.close()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()

    def wait_ready(self, timeout: float = 60) -> Self:
        """Wait until the launched process listens (RuntimeError as `start` says)."""
        if self.proc is None or not self._ready.wait(timeout) or self.proc.poll() is not None:
            self._dump_stacks()
            self.kill()
            raise RuntimeError(f"{self.name} did not start:\n" + "".join(self.log[-120:]))
        return self

    def _dump_stacks(self) -> None:
        """Ask a process that is alive but not ready for its threads' stacks
        (``stack_dump_signal``), so the error shows where it hangs."""
        proc = self.proc
        if self.stack_dump_signal is None or proc is None or proc.poll() is not None:
            return
        before = len(self.log)
        os.kill(proc.pid, self.stack_dump_signal)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and len(self.log) == before:
            time.sleep(0.05)  # the stderr pump collects the dump; a failure path only
        time.sleep(0.2)  # the rest of the dump's lines

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, SIGKILL when it has not ended within ``timeout`` (`terminate_process`);
        returns its exit status (0 if not started)."""
        proc, self.proc = self.proc, None
        return 0 if proc is None else terminate_process(proc, timeout)

    def kill(self) -> None:
        """kill -9, and wait for it."""
        proc, self.proc = self.proc, None
        if proc is not None:
            kill_process(proc)

    def pause(self) -> None:
        """SIGSTOP: the process holds its connections but answers nothing."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)


def terminate_process(proc: subprocess.Popen[Any], timeout: float = 30) -> int:
    """SIGTERM by PID (after SIGCONT: a paused process must run to handle it), then
    SIGKILL if it has not ended within ``timeout``; returns its exit status."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout)
    return proc.returncode


def kill_process(proc: subprocess.Popen[Any]) -> None:
    """kill -9 by PID, and wait for it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
