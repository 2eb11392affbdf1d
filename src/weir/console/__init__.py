"""The web console: see and operate a weir server in a browser (served by `weir serve`).

`Console` adds its pages under /console to the server's HTTP application (the one that
serves /metrics); see docs/console.md.
"""

from weir.console.app import Console

__all__ = ["Console"]
