"""Every asyncio task of the running loop with its stack, as text.

A thread dump (faulthandler) shows a coroutine that waits only as the loop's
``select``; this shows what each task awaits. `weir serve` prints it on SIGUSR2, and
a test whose load gets stuck puts it in its failure.
"""

from __future__ import annotations

import asyncio


def task_stacks() -> str:
    """Call from inside the loop. Written by hand: ``Task.print_stack`` fails on a frame
    without a line number (Python 3.11, gRPC's Cython coroutines)."""
    tasks = asyncio.all_tasks()
    lines = [f"--- {len(tasks)} asyncio tasks"]
    for task in tasks:
        lines.append(f"Stack for {task!r}:")
        for frame in task.get_stack():
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
    return "\n".join(lines)
