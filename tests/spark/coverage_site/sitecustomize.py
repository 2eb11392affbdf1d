"""Coverage data from Spark's Python workers, under `make coverage` only.

tests/spark/session.py puts this directory on the PYTHONPATH of Spark's processes while
coverage runs, so Python imports this module at the start of each of them. Spark forks its
Python workers from daemons (`python -m pyspark.daemon`) and kills them (SIGKILL, SIGHUP)
when it is done, so a worker never exits on its own and coverage never saves what it
measured there. coverage's fork patch starts a fresh measurement in each forked worker;
the hook below makes the worker save it after every task it runs.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _save_after_each_task() -> None:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) != "pyspark.daemon":
        return
    run_task = main.worker  # type: ignore[union-attr]

    def worker(*args: Any, **kwargs: Any) -> Any:
        try:
            return run_task(*args, **kwargs)
        finally:
            import coverage

            cov = coverage.Coverage.current()
            if cov is not None:
                cov.save()

    main.worker = worker  # type: ignore[union-attr]


os.register_at_fork(after_in_child=_save_after_each_task)
