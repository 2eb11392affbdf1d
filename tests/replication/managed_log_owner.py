"""An owner of a managed log in a process of its own, so a test can SIGSTOP or SIGKILL it.

Usage: python managed_log_owner.py ZK_HOSTS ZK_ROOT LOG_NAME TAG COUNT

Opens the log, prints ``opened <end offset> <generation>``, then appends COUNT
entries of one offset each (payload ``TAG:n``) with 8 in flight, printing
``ack <offset> <payload>`` for each acknowledged one as it completes, and on the
first error ``error <CODE>`` and exits 3. Ends with ``done``.
"""

from __future__ import annotations

import asyncio
import sys

from weir.errors import WeirError
from weir.replication.ledger import LedgerClient
from weir.replication.managed_log import ManagedLog, ManagedLogConfig


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(hosts: str, root: str, name: str, tag: str, count: int) -> int:
    async with LedgerClient(hosts, root=root, zk_timeout=4.0, request_timeout=5.0) as client:
        mlog = await ManagedLog.open(
            client, name, ManagedLogConfig(max_entries_per_ledger=40), owner=tag
        )
        say(f"opened {mlog.end_offset} {mlog.generation}")
        in_flight: set[asyncio.Future[object]] = set()
        for n in range(count):
            payload = f"{tag}:{n}".encode()
            try:
                fut = mlog.append_async(payload, 1)
            except WeirError as exc:
                say(f"error {exc.code}")
                return 3

            def acked(f: asyncio.Future[object], payload: bytes = payload) -> None:
                if not f.cancelled() and f.exception() is None:
                    res = f.result()
                    say(f"ack {res.first_offset} {payload.decode()}")  # type: ignore[attr-defined]

            fut.add_done_callback(acked)
            in_flight.add(fut)  # type: ignore[arg-type]
            if len(in_flight) >= 8:
                done, in_flight = await asyncio.wait(in_flight, return_when="FIRST_COMPLETED")
                for f in done:
                    exc = f.exception()
                    if isinstance(exc, WeirError):
                        say(f"error {exc.code}")
                        return 3
        await asyncio.gather(*in_flight, return_exceptions=True)
        await mlog.close()
        say("done")
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5], int(sys.argv[5]))))
