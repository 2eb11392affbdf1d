"""``python -m weir.replication.bookie``: run one bookie until SIGTERM / SIGINT.

Prints ``bookie listening on HOST:PORT`` on stderr once it serves and is
registered in ZooKeeper as available.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.retry import KazooRetry

from weir.replication.bookie.disk_space import DEFAULT_MIN_DISK_FREE, SpacePolicy
from weir.replication.bookie.garbage_collector import collect
from weir.replication.bookie.ledger_storage import LmdbLedgerStorage
from weir.replication.bookie.metrics import BookieMetrics, BookieMetricsEndpoint
from weir.replication.bookie.service import Bookie
from weir.replication.registry import DEFAULT_ROOT, BookieRegistration, ledgers_path
from weir.replication.tls import BookieTls


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m weir.replication.bookie", description=__doc__)
    ap.add_argument("--data-dir", required=True, help="the bookie's LMDB directory")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free port)")
    ap.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    ap.add_argument("--zk-root", default=DEFAULT_ROOT, help="the cluster's root path in ZooKeeper")
    ap.add_argument("--zk-session-timeout", type=float, default=10.0, help="seconds")
    ap.add_argument("--rack", default="", help="a placement label (rack or zone)")
    ap.add_argument(
        "--min-disk-free",
        type=int,
        default=DEFAULT_MIN_DISK_FREE,
        help="bytes the disk must keep free; below, the bookie turns read-only",
    )
    ap.add_argument(
        "--max-data-bytes",
        type=int,
        default=0,
        help="a cap on the bookie's data; past it, the bookie turns read-only (0: none)",
    )
    ap.add_argument(
        "--gc-interval",
        type=float,
        default=60.0,
        help="seconds between garbage collections of deleted ledgers (0: never)",
    )
    ap.add_argument(
        "--space-check-interval",
        type=float,
        default=5.0,
        help="seconds between disk checks (a read-only bookie turns writable again)",
    )
    ap.add_argument(
        "--metrics-listen",
        default="",
        help="HOST:PORT of /metrics, /healthz, /readyz (port 0: any; empty: off)",
    )
    ap.add_argument("--tls-cert", default="", help="the bookie's certificate (PEM): TLS only")
    ap.add_argument("--tls-key", default="", help="its private key (PEM)")
    ap.add_argument(
        "--tls-ca", default="", help="the CA (PEM) that signs the clients' certificates"
    )
    args = ap.parse_args(argv)
    given = [bool(args.tls_cert), bool(args.tls_key), bool(args.tls_ca)]
    if any(given) and not all(given):
        ap.error("TLS needs all of --tls-cert, --tls-key and --tls-ca")
    return args


def _listed_ledgers(zk: KazooClient, root: str) -> set[int]:
    try:
        children = zk.get_children(ledgers_path(root))
    except NoNodeError:
        return set()
    return {int(c[1:]) for c in children if c.startswith("L") and c[1:].isdigit()}


async def collect_garbage(
    bookie: Bookie, zk: KazooClient, root: str, interval: float, stop: asyncio.Event
) -> None:
    """Every ``interval`` s: drop the ledgers whose metadata is gone (garbage_collector.py)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if stop.is_set():
            return
        try:
            listed = await asyncio.to_thread(_listed_ledgers, zk, root)
            await collect(bookie, listed)
        except Exception as exc:  # ZooKeeper away: try again next time
            logging.getLogger("weir.replication.bookie").warning("garbage collection: %s", exc)


async def run(args: argparse.Namespace) -> None:
    host, _, port = args.listen.rpartition(":")
    metrics = BookieMetrics() if args.metrics_listen else None
    storage = LmdbLedgerStorage(
        args.data_dir, observer=metrics.on_commit if metrics is not None else None
    )
    space = SpacePolicy(min_disk_free=args.min_disk_free, max_data_bytes=args.max_data_bytes)
    bookie = Bookie(storage, space=space, metrics=metrics)
    endpoint = None
    if metrics is not None:
        metrics.bookie = bookie
        endpoint = BookieMetricsEndpoint(metrics, args.metrics_listen)
        await endpoint.start()
        print(
            f"bookie metrics listening on {endpoint.host}:{endpoint.port}",
            file=sys.stderr,
            flush=True,
        )
    # Reconnect within a second of ZooKeeper coming back (kazoo's default backoff grows to
    # a minute): a bookie whose session expired must register again quickly.
    zk = KazooClient(
        hosts=args.zk,
        timeout=args.zk_session_timeout,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        tls = None
        if args.tls_cert:
            tls = BookieTls(Path(args.tls_ca), Path(args.tls_cert), Path(args.tls_key))
        bound_host, bound_port = await bookie.serve(
            host or "127.0.0.1", int(port), tls.server_context() if tls else None
        )
        bookie_id = f"{bound_host}:{bound_port}"
        await asyncio.to_thread(zk.start, 30)
        labels = {"rack": args.rack} if args.rack else {}
        registration = BookieRegistration(zk, args.zk_root, bookie_id, labels)
        registration.read_only = bookie.space.read_only
        await asyncio.to_thread(registration.register)

        def on_mode(read_only: bool, reason: str) -> None:
            print(
                f"bookie {'read-only: ' + reason if read_only else 'writable again'}",
                file=sys.stderr,
                flush=True,
            )
            loop.run_in_executor(None, registration.set_read_only, read_only)

        bookie.space.listeners.append(on_mode)
        if metrics is not None:
            metrics.ready = True
        print(f"bookie listening on {bookie_id}", file=sys.stderr, flush=True)
        gc = None
        if args.gc_interval > 0:
            gc = asyncio.create_task(
                collect_garbage(bookie, zk, args.zk_root, args.gc_interval, stop)
            )
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.space_check_interval)
            bookie.space.check()
        if gc is not None:
            await gc
        await asyncio.to_thread(registration.unregister)
    finally:
        if endpoint is not None:
            await endpoint.stop()
        await bookie.close()
        zk.stop()
        zk.close()
        storage.close()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(run(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
