"""PNG charts of one harness run (matplotlib, no display needed).

Every bar is the median over repetitions and its whisker the min-max, so a
reader sees at once whether two systems differ by more than the noise of this
shared machine.  Charts: throughput (4 panels: produce/consume x 100 B/10 KB),
latency (ack and end-to-end p50/p99 at a fixed rate), latency over time (p99
per 100 ms of that run), fsyncs/s against the
number of partitions, and the ydb SDK against weir vs the null server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from bench.report import (
    DISK,
    WEIR,
    WEIR_TCP,
    WEIR_YDB,
    YDB_NULL,
    Cell,
    Rows,
    cells,
    median,
    system_key,
)

FSYNC = {
    WEIR: "fsync",
    WEIR_TCP: "fsync",
    WEIR_YDB: "fsync",
    "nats-js-fsync": "fsync",
    "nats-js-default": "no fsync",
    "redis-aof-always": "fsync",
    "rabbitmq-stream": "no fsync",
    YDB_NULL: "stores nothing",
}

COLORS = {
    WEIR: "#1f77b4",
    WEIR_TCP: "#9467bd",
    WEIR_YDB: "#17becf",
    YDB_NULL: "#7f7f7f",
    "nats-js-fsync": "#d62728",
    "nats-js-default": "#ff9896",
    "redis-aof-always": "#2ca02c",
    "rabbitmq-stream": "#ff7f0e",
    DISK: "#8c564b",
}


def _stats(c: Cell, key: str) -> tuple[float, float, float]:
    v = c.values(key) if key in c.rows[0] else c.extras(key)
    m = median(v)
    return m, m - min(v), max(v) - m


def _grouped(
    ax: Any,
    groups: Sequence[str],
    systems: Sequence[str],
    value: Any,
    ylabel: str,
    title: str,
    goal: float | None = None,
    log: bool = True,
) -> None:
    """Bars per system within each group; ``value(system, group)`` -> (median, -err, +err)."""
    width = 0.8 / max(1, len(systems))
    lows: list[float] = []
    highs: list[float] = []
    for i, s in enumerate(systems):
        xs, ys, lo, hi = [], [], [], []
        for g_i, g in enumerate(groups):
            v = value(s, g)
            if v is None:
                continue
            xs.append(g_i + (i - (len(systems) - 1) / 2) * width)
            ys.append(v[0])
            lo.append(v[1])
            hi.append(v[2])
            lows.append(v[0] - v[1])
            highs.append(v[0] + v[2])
        if xs:
            label = f"{s} [{FSYNC[s]}]" if s in FSYNC else s
            ax.bar(xs, ys, width, label=label, color=COLORS.get(s), yerr=[lo, hi], capsize=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
        floor = min([x for x in lows if x > 0] + ([goal] if goal else []), default=1.0)
        top = max(highs + ([goal] if goal else []), default=10.0)
        ax.set_ylim(10 ** math.floor(math.log10(floor)), top * 2)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(_num))
    if goal is not None:
        ax.axhline(goal, color="black", linestyle="--", linewidth=1, label=f"goal {goal:,.0f}")
    ax.grid(axis="y", alpha=0.3)


def _num(v: float, _pos: Any = None) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _saturated_note(ax: Any, cs: dict[tuple[str, str], Cell], wl: str) -> None:
    sat = [s for (s, w), c in cs.items() if w == wl and c.saturated]
    if sat:
        ax.text(
            0.01,
            0.99,
            "could not sustain the rate (lower bounds): " + ", ".join(sat),
            transform=ax.transAxes,
            va="top",
            fontsize=8,
        )


def _legend(fig: Any, axes: Any) -> None:
    """One legend for the figure, below the panels."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if not label.startswith("goal"):
                seen.setdefault(label, h)
    if not seen:  # no panel had data (a run of other workloads)
        return
    fig.legend(
        list(seen.values()), list(seen), loc="lower center", ncol=min(4, len(seen)), fontsize=9
    )


def _save_panels(fig: Any, axes: Any, title: str, out: Path) -> Path:
    """One legend below the panels, the title above, and the PNG written."""
    _legend(fig, axes)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def throughput(rows: Rows, out: Path) -> Path | None:
    cs = cells(rows)
    panels = [
        ("produce", "100B", ("P=1", "P=4"), "msgs_per_s", "messages/s", 500_000),
        ("consume", "100B", ("C=1", "C=2"), "msgs_per_s", "messages/s", 1_000_000),
        ("produce", "10KB", ("P=1", "P=4"), "mb_per_s", "MB/s", 750),
        ("consume", "10KB", ("C=1", "C=2"), "mb_per_s", "MB/s", None),
    ]
    systems = sorted({s for (s, wl) in cs if wl.startswith(("produce", "consume"))}, key=system_key)
    if not systems:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for ax, (op, size, groups, key, unit, goal) in zip(axes.flat, panels, strict=True):

        def value(s: str, g: str, op: str = op, size: str = size, key: str = key) -> Any:
            c = cs.get((s, f"{op} {g} {size}"))
            return _stats(c, key) if c else None

        _grouped(ax, groups, systems, value, unit, f"{op} {size} (median, whiskers min-max)", goal)
    _legend(fig, axes.flat)
    fig.suptitle("Throughput on one machine, client and server on it (dashed: goal)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def latency(rows: Rows, out: Path) -> Path | None:
    cs = cells(rows)
    lat = {wl for (_, wl) in cs if wl.startswith("latency")}
    if not lat:
        return None
    systems = sorted({s for (s, wl) in cs if wl in lat}, key=system_key)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, kind, goal in zip(axes, ("ack", "e2e"), (1.0, 2.0), strict=True):
        wl = next((w for w in sorted(lat) if w.startswith(f"latency-{kind}")), None)
        if wl is None:
            continue

        def value(s: str, g: str, wl: str = wl) -> Any:
            c = cs.get((s, wl))
            if c is None or not c.values(f"{g}_ms"):
                return None
            return _stats(c, f"{g}_ms")

        _grouped(ax, ("p50", "p99"), systems, value, "ms (log)", wl, goal)
        _saturated_note(ax, cs, wl)
    return _save_panels(
        fig,
        axes,
        "Publish-to-ack and publish-to-consume latency at a fixed rate (dashed: goal)",
        out,
    )


def latency_timeline(rows: Rows, out: Path) -> Path | None:
    """p99 per 100 ms of the paced run, one line per system: whether a tail is a few
    stalls or the whole run.  Each system's line is its repetition with the median p99."""
    cs = cells(rows)
    lat = {wl for (_, wl) in cs if wl.startswith("latency")}
    if not any(c.extras("timeline") for (_, wl), c in cs.items() if wl in lat):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, kind, goal in zip(axes, ("ack", "e2e"), (1.0, 2.0), strict=True):
        wl = next((w for w in sorted(lat) if w.startswith(f"latency-{kind}")), None)
        if wl is None:
            continue
        for s in sorted({s for (s, w) in cs if w == wl}, key=system_key):
            reps = [r for r in cs[(s, wl)].rows if r["extra"].get("timeline")]
            if not reps:
                continue
            reps.sort(key=lambda r: r["p99_ms"] or 0.0)
            line = reps[len(reps) // 2]["extra"]["timeline"]
            label = f"{s} [{FSYNC[s]}]" if s in FSYNC else s
            ax.plot(
                [w[0] for w in line],
                [max(w[2], 1e-3) for w in line],
                label=label,
                color=COLORS.get(s),
                linewidth=1,
            )
        ax.axhline(goal, color="black", linestyle="--", linewidth=1, label=f"goal {goal:g}")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_num))
        ax.set_xlabel("s into the paced run")
        ax.set_ylabel("p99 of each 100 ms, ms (log)")
        ax.set_title(wl, fontsize=10)
        ax.grid(alpha=0.3)
    return _save_panels(
        fig, axes, "Latency over time at a fixed rate (the repetition with the median p99)", out
    )


def partitions(rows: Rows, out: Path) -> Path | None:
    cs = cells(rows)
    pts = sorted(
        (c.rows[0]["extra"]["partitions"], c)
        for (s, wl), c in cs.items()
        if s == WEIR and wl.startswith("partitions=")
    )
    if not pts:
        return None
    xs = [p for p, _ in pts]
    fig, ax = plt.subplots(figsize=(8, 5))
    f = [_stats(c, "fsyncs_per_s") for _, c in pts]
    ax.errorbar(
        xs,
        [v[0] for v in f],
        yerr=[[v[1] for v in f], [v[2] for v in f]],
        marker="o",
        color=COLORS[WEIR],
        capsize=3,
        label="weir fsyncs/s (group commits)",
    )
    disk = cs.get((DISK, "append 100B"))
    if disk is not None:
        ax.axhline(
            median(disk.values("msgs_per_s")),
            color=COLORS[DISK],
            linestyle=":",
            label="disk: append 100 B + fdatasync per s",
        )
    ax.set_xscale("log")
    ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(FuncFormatter(_num))
    ax.set_xlabel("partitions written round-robin")
    ax.set_ylabel("fsyncs per second")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    m = [_stats(c, "msgs_per_s") for _, c in pts]
    ax2.errorbar(
        xs,
        [v[0] for v in m],
        yerr=[[v[1] for v in m], [v[2] for v in m]],
        marker="s",
        color="#555555",
        linestyle="--",
        capsize=3,
        label="weir messages/s",
    )
    ax2.set_ylabel("messages per second")
    ax2.yaxis.set_major_formatter(FuncFormatter(_num))
    ax2.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper right")
    ax.set_title("Many partitions: fsyncs/s and messages/s as the partition count grows")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def ydb(rows: Rows, out: Path) -> Path | None:
    cs = cells(rows)
    wls = sorted({wl for (_, wl) in cs if wl.startswith("ydb ")}, key=lambda w: ("[" in w, w))
    if not wls:
        return None
    labels = [w.replace("ydb ", "").replace(" P=1 100B", "") for w in wls]
    systems = [s for s in (WEIR_YDB, YDB_NULL) if any((s, w) in cs for w in wls)]
    fig, ax = plt.subplots(figsize=(9, 5))

    def value(s: str, g: str) -> Any:
        c = cs.get((s, wls[labels.index(g)]))
        return _stats(c, "msgs_per_s") if c else None

    _grouped(ax, labels, systems, value, "messages/s", "ydb SDK: weir's YDB front vs a null server")
    for i, w in enumerate(wls):
        a, b = cs.get((WEIR_YDB, w)), cs.get((YDB_NULL, w))
        if a and b and b.mps:
            ax.annotate(
                f"{a.mps / b.mps:.2f}x",
                (i, max(a.mps, b.mps)),
                ha="center",
                va="bottom",
                fontsize=9,
            )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def make_all(rows: Rows, prefix: Path) -> list[Path]:
    """Every chart that has data, as ``<prefix>-<name>.png``."""
    from bench import cluster_bench

    made = []
    for name, fn in (
        ("cluster", cluster_bench.chart),
        ("throughput", throughput),
        ("latency", latency),
        ("latency-timeline", latency_timeline),
        ("partitions", partitions),
        ("ydb", ydb),
    ):
        p = fn(rows, Path(f"{prefix}-{name}.png"))
        if p is not None:
            made.append(p)
    return made
