"""A progress bar on stderr for long writes and reads, or nothing at all when off."""

from __future__ import annotations

import time
from types import TracebackType

from rich import progress as rp
from rich.text import Text

from weir.cli import output

_REFRESH_S = 0.1


class BinarySpeedColumn(rp.ProgressColumn):
    """Transfer speed in binary units (KiB/s, MiB/s), as the summaries print sizes."""

    def render(self, task: rp.Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text("?", style="progress.data.speed")
        return Text(f"{output.human_bytes(int(speed))}/s", style="progress.data.speed")


class Progress:
    """Counts messages (and input bytes when ``total`` is a byte count) at most 10 times a second.

    Updates are cheap when the bar is off, so callers update on every message.
    """

    def __init__(
        self, description: str, *, total: int | None, enabled: bool, unit: str = "bytes"
    ) -> None:
        self.enabled = enabled
        self.total = total
        self.unit = unit
        self._last = 0.0
        self._bar: rp.Progress | None = None
        self._task: rp.TaskID | None = None
        if enabled:
            columns: list[rp.ProgressColumn] = [
                rp.SpinnerColumn(),
                rp.TextColumn("{task.description}"),
                rp.BarColumn(),
            ]
            if unit == "bytes":
                columns += [
                    rp.TextColumn("{task.fields[messages]} messages"),
                    rp.DownloadColumn(binary_units=True),  # MiB, as the summary counts
                    BinarySpeedColumn(),
                ]
            else:
                columns.append(rp.MofNCompleteColumn())
            columns.append(rp.TimeElapsedColumn())
            self._bar = rp.Progress(*columns, console=output.stderr, transient=False)
            self._task = self._bar.add_task(description, total=total, messages=0)

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, *, completed: int, messages: int, force: bool = False) -> None:
        if self._bar is None or self._task is None:
            return
        now = time.monotonic()
        if not force and now - self._last < _REFRESH_S:
            return
        self._last = now
        self._bar.update(self._task, completed=completed, messages=messages)

    def finish(self, *, completed: int, messages: int) -> None:
        """Show the final counts (and a full bar when the total was reached)."""
        self.update(completed=completed, messages=messages, force=True)
