"""The audit log: one JSON object per line for each authentication failure, each refusal,
each admin operation allowed on a topic, and each change of users or grants.

Off unless ``log.audit_file`` names a file (``weir serve`` calls `configure`); the
events go to the ``weir.audit`` logger, which does not pass them on to the server's
own log. Secrets never appear: events carry names, never passwords or tokens.
"""

from __future__ import annotations

import logging
from pathlib import Path

from weir.logs import JsonFormatter

log = logging.getLogger("weir.audit")
log.propagate = False
log.setLevel(logging.CRITICAL + 1)  # off until configured


def configure(path: Path | None) -> None:
    """Append audit events to ``path`` (JSON lines); None turns the audit log off."""
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    if path is None:
        log.setLevel(logging.CRITICAL + 1)
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(JsonFormatter())
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def event(name: str, **fields: object) -> None:
    """One audit event (cheap when the audit log is off)."""
    if log.isEnabledFor(logging.INFO):
        log.info(name, extra={"audit": name, **fields})
