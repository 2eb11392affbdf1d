"""What every throughput workload of weir's fronts shares (native SDK, Kafka, Pulsar, YDB).

Worker side, :class:`Window`: a worker meets the others at the start gate, then its
clock and CPU run from there and every loop stops at its count or at the time cap,
whichever comes first; :meth:`Window.result` is the dict the parent merges.

Parent side, :func:`measure`: the server's CPU (from /proc) and, optionally, its
metrics page around one run of the worker processes; :meth:`Run.row` is the table row
(``bench.peers.workloads.Result``) with the client's and the server's CPU per message.
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers import servers
from bench.peers.workloads import (
    Gate,
    Result,
    Target,
    WorkerFn,
    _merge_throughput,
    _now,
    _run_workers,
)

# --------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------


class Window:
    """One worker's measured span, opened at the start gate: its start (monotonic ns),
    its CPU, and the time cap the loops check (``capped`` once it has passed)."""

    def __init__(self, gate: Gate, max_seconds: float) -> None:
        gate.wait()
        self.c0 = time.process_time()
        self.t0 = _now()
        self.deadline = self.t0 + int(max_seconds * 1e9)
        self.capped = False

    def over(self, now: int | None = None) -> bool:
        """True once the time cap has passed (and from then on ``capped``); ``now`` is
        the loop's own reading of the clock, if it took one."""
        if (_now() if now is None else now) > self.deadline:
            self.capped = True
        return self.capped

    def cpu(self) -> float:
        """This process's CPU seconds since the gate."""
        return time.process_time() - self.c0

    def result(
        self, messages: int, nbytes: int, t_end: int, cpu_s: float | None = None, **more: Any
    ) -> dict[str, Any]:
        """The worker's dict for ``_merge_throughput``: counts, span, cap, CPU (now unless
        given) and the workload's own keys (``sent``, ``failed``, ``ack_timeout``...)."""
        return dict(
            messages=messages,
            bytes=nbytes,
            t_start=self.t0,
            t_end=t_end,
            capped=self.capped,
            cpu_s=self.cpu() if cpu_s is None else cpu_s,
            **more,
        )


# --------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (from /proc): server CPU is robust on a noisy machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_LE = re.compile(r'le="([^"]+)"')


def scrape(metrics_port: int | None, timeout: float = 10.0) -> dict[str, float]:
    """Samples of the server's /metrics page, summed over labels; histogram buckets
    are kept per bound as ``name|le``.  Empty without a metrics port or on error."""
    if not metrics_port:
        return {}
    url = f"http://{servers.LOOPBACK}:{metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        if name.endswith("_bucket"):
            m = _LE.search(name_labels)
            if not m:
                continue
            name = f"{name}|{m.group(1)}"
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def add_cpu(res: Result, parts: list[dict[str, Any]], server_pid: int | None, cpu0: float) -> None:
    """The workers' CPU, and the server's since ``cpu0`` (total and per message of ``res``)."""
    res.extra["client_cpu_s"] = round(sum(p.get("cpu_s", 0.0) for p in parts), 3)
    if server_pid is not None:
        cpu = cpu_seconds(server_pid) - cpu0
        res.extra["server_cpu_s"] = round(cpu, 3)
        if res.messages:
            res.extra["server_cpu_us_per_msg"] = round(cpu / res.messages * 1e6, 3)


@dataclass
class Run:
    """The workers' dicts of one measured run, with the server's CPU and metrics before it
    (``before`` and ``after`` are empty without a metrics port)."""

    target: Target
    parts: list[dict[str, Any]]
    server_pid: int | None
    cpu0: float
    before: dict[str, float]
    after: dict[str, float]

    def merge(self, workload: str, extra: dict[str, Any]) -> Result:
        """The row of the workers' counts, without the CPU (see :meth:`add_cpu`)."""
        return _merge_throughput(self.target, workload, self.parts, extra)

    def add_cpu(self, res: Result) -> None:
        add_cpu(res, self.parts, self.server_pid, self.cpu0)

    def row(self, workload: str, extra: dict[str, Any], available: int | None = None) -> Result:
        """The row with its CPU; with ``available`` (a consume row) also ``unread``."""
        res = self.merge(workload, extra)
        if available is not None:
            res.extra["unread"] = available - res.messages
        self.add_cpu(res)
        return res


def measure(
    t: Target,
    specs: Sequence[tuple[WorkerFn, dict[str, Any]]],
    max_seconds: float,
    server_pid: int | None = None,
    metrics_port: int | None = None,
    slack: float = 180.0,
) -> Run:
    """One process per (worker, params) until all report (or ``max_seconds + slack``)."""
    cpu0 = cpu_seconds(server_pid) if server_pid else 0.0
    before = scrape(metrics_port)
    parts = _run_workers(t, specs, timeout=max_seconds + slack)
    after = scrape(metrics_port)
    return Run(t, parts, server_pid, cpu0, before, after)
