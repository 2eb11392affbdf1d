"""`weir bookie`, `weir ledger`, `weir cluster`: replicated ledgers from the command line.

``weir bookie serve`` runs one bookie; ``weir cluster up`` a ZooKeeper, N bookies and N
brokers on loopback for development; ``weir cluster auditor`` an elected auditor; ``weir bookie
list``, ``weir ledger list|describe|recover`` and ``weir cluster audit`` are for operators. Every command finds the cluster through ``--zk`` (``WEIR_ZK``) and
``--zk-root``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from weir.cli import output

if TYPE_CHECKING:
    from weir.replication.ledger import LedgerClient, LedgerMetadata

# The replication modules (and kazoo) load only when one of these commands runs:
# every other `weir` command starts without them.
DEFAULT_ROOT = "/weir"

T = TypeVar("T")

Zk = Annotated[
    str,
    typer.Option("--zk", envvar="WEIR_ZK", help="ZooKeeper connect string (host:port,...)."),
]
ZkRoot = Annotated[str, typer.Option("--zk-root", help="The cluster's root path in ZooKeeper.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]

bookie_app = typer.Typer(help="Run and list bookies.", no_args_is_help=True)
ledger_app = typer.Typer(help="List, describe and recover ledgers.", no_args_is_help=True)
cluster_app = typer.Typer(
    help="A local cluster for development; audits of the bookies.", no_args_is_help=True
)


@bookie_app.command("serve")
def bookie_serve(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="The bookie's LMDB directory.")],
    zk: Zk = "127.0.0.1:2181",
    zk_root: ZkRoot = DEFAULT_ROOT,
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT (port 0: any).")] = (
        "127.0.0.1:3181"
    ),
    rack: Annotated[str, typer.Option("--rack", help="A placement label.")] = "",
    metrics_listen: Annotated[
        str,
        typer.Option("--metrics-listen", help="HOST:PORT of /metrics, /healthz (off unless set)."),
    ] = "",
    tls_cert: Annotated[
        str, typer.Option("--tls-cert", help="The bookie's certificate (PEM): TLS only.")
    ] = "",
    tls_key: Annotated[str, typer.Option("--tls-key", help="Its private key (PEM).")] = "",
    tls_ca: Annotated[
        str, typer.Option("--tls-ca", help="The CA (PEM) that signs the clients' certificates.")
    ] = "",
) -> None:
    """Run one bookie until SIGTERM / Ctrl-C; registered in ZooKeeper while it runs."""
    from weir.replication.bookie.__main__ import parse_args
    from weir.replication.bookie.__main__ import run as run_bookie

    argv = ["--data-dir", str(data_dir), "--listen", listen, "--zk", zk, "--zk-root", zk_root]
    if rack:
        argv += ["--rack", rack]
    if metrics_listen:
        argv += ["--metrics-listen", metrics_listen]
    for flag, value in (("--tls-cert", tls_cert), ("--tls-key", tls_key), ("--tls-ca", tls_ca)):
        if value:
            argv += [flag, value]
    asyncio.run(run_bookie(parse_args(argv)))


@bookie_app.command("list")
def bookie_list(
    zk: Zk = "127.0.0.1:2181", zk_root: ZkRoot = DEFAULT_ROOT, json: Json = False
) -> None:
    """The bookies registered as available."""
    from kazoo.client import KazooClient

    from weir.replication.registry import available_bookies

    client = KazooClient(hosts=zk)
    client.start(timeout=10)
    try:
        found = available_bookies(client, zk_root)
    finally:
        client.stop()
        client.close()
    if json:
        output.print_json([{"bookie": b, "labels": found[b]} for b in sorted(found)])
        return
    for b in sorted(found):
        labels = " ".join(f"{k}={v}" for k, v in sorted(found[b].items()))
        output.stdout.out(f"{b} {labels}".rstrip())


@bookie_app.command("decommission")
def bookie_decommission(
    bookie: Annotated[str, typer.Argument(help="The bookie's id (HOST:PORT).")],
    zk: Zk = "127.0.0.1:2181",
    zk_root: ZkRoot = DEFAULT_ROOT,
) -> None:
    """Move a stopped bookie's share of every closed ledger to other bookies."""
    from weir.cli.common import CliError, plural
    from weir.replication.ledger.auditor import Auditor
    from weir.replication.ledger.auditor_election import audit_once_exclusively

    async def body(client: LedgerClient) -> dict[int, list[str]]:
        if bookie in await Auditor(client).registered():
            raise CliError(f"bookie {bookie} is still registered: stop it first")
        return await audit_once_exclusively(client, _operator(), {bookie})

    fixed = _with_client(zk, zk_root, body)
    for lid in sorted(fixed):
        output.stdout.out(f"ledger {lid}: re-replicated the entries of {bookie}")
    output.stdout.out(f"bookie {bookie} decommissioned ({plural(len(fixed), 'ledger')} moved)")


def _operator() -> str:
    """An operator's one-off pass, as named in the auditor election."""
    import os
    import socket

    return f"operator {socket.gethostname()}:{os.getpid()}"


def _with_client(zk: str, zk_root: str, body: Callable[[LedgerClient], Awaitable[T]]) -> T:
    """Run ``body`` with a ledger client; mutual TLS to the bookies when
    ``WEIR_BOOKIE_TLS_CA``, ``WEIR_BOOKIE_TLS_CERT`` and ``WEIR_BOOKIE_TLS_KEY`` are set."""
    import os

    from weir.replication.ledger import LedgerClient
    from weir.replication.tls import BookieTls

    files = [os.environ.get(f"WEIR_BOOKIE_TLS_{k}", "") for k in ("CA", "CERT", "KEY")]
    if any(files) and not all(files):
        raise SystemExit(
            "error: bookie TLS needs all of WEIR_BOOKIE_TLS_CA, WEIR_BOOKIE_TLS_CERT and "
            "WEIR_BOOKIE_TLS_KEY"
        )
    tls = BookieTls(*(Path(f) for f in files)) if all(files) else None

    async def go() -> T:
        async with LedgerClient(zk, root=zk_root, tls=tls) as client:
            return await body(client)

    return asyncio.run(go())


def _describe(ledger_id: int, md: LedgerMetadata) -> dict[str, object]:
    return {
        "ledger": ledger_id,
        "state": md.state.value,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "last_entry_id": md.last_entry_id,
        "ctime_ms": md.ctime_ms,
        "ensembles": [
            {"first_entry": f.first_entry, "bookies": list(f.bookies)} for f in md.ensembles
        ],
    }


def _print_ledger(info: dict[str, object]) -> None:
    last = info["last_entry_id"] if info["state"] == "CLOSED" else "-"
    output.stdout.out(
        f"ledger {info['ledger']}: {info['state']}, E={info['ensemble_size']} "
        f"WQ={info['write_quorum']} AQ={info['ack_quorum']}, last entry {last}"
    )
    for frag in info["ensembles"]:  # type: ignore[attr-defined]
        output.stdout.out(f"  from entry {frag['first_entry']}: {' '.join(frag['bookies'])}")


@ledger_app.command("list")
def ledger_list(
    zk: Zk = "127.0.0.1:2181", zk_root: ZkRoot = DEFAULT_ROOT, json: Json = False
) -> None:
    """Every ledger with its state."""

    async def body(client: LedgerClient) -> list[dict[str, object]]:
        out = []
        for lid in await client.list_ledgers():
            md, _ = await client.store.read(lid)
            out.append(_describe(lid, md))
        return out

    infos = _with_client(zk, zk_root, body)
    if json:
        output.print_json(infos)
        return
    for info in infos:
        last = info["last_entry_id"] if info["state"] == "CLOSED" else "-"
        output.stdout.out(f"{info['ledger']} {info['state']} last entry {last}")


@ledger_app.command("describe")
def ledger_describe(
    ledger_id: Annotated[int, typer.Argument(help="The ledger id.")],
    zk: Zk = "127.0.0.1:2181",
    zk_root: ZkRoot = DEFAULT_ROOT,
    json: Json = False,
) -> None:
    """A ledger's metadata: state, quorums, last entry, ensembles."""

    async def body(client: LedgerClient) -> dict[str, object]:
        md, _ = await client.store.read(ledger_id)
        return _describe(ledger_id, md)

    info = _with_client(zk, zk_root, body)
    if json:
        output.print_json(info)
    else:
        _print_ledger(info)


@ledger_app.command("recover")
def ledger_recover(
    ledger_id: Annotated[int, typer.Argument(help="The ledger id.")],
    zk: Zk = "127.0.0.1:2181",
    zk_root: ZkRoot = DEFAULT_ROOT,
    json: Json = False,
) -> None:
    """Fence the ledger's writer out, re-replicate its tail and close it."""

    async def body(client: LedgerClient) -> dict[str, object]:
        return _describe(ledger_id, await client.recover(ledger_id))

    info = _with_client(zk, zk_root, body)
    if json:
        output.print_json(info)
    else:
        _print_ledger(info)


@cluster_app.command("up")
def cluster_up(
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir",
            "--dir",
            help="Where ZooKeeper, bookies and brokers keep data (a directory each) and logs.",
        ),
    ] = Path("weir-cluster"),
    brokers: Annotated[
        int, typer.Option("--brokers", min=0, help="How many brokers (weir serve, replicated).")
    ] = 3,
    bookies: Annotated[int, typer.Option("--bookies", min=1, help="How many bookies.")] = 3,
    zookeeper: Annotated[
        str,
        typer.Option(
            "--zookeeper", help="Use this ZooKeeper (host:port,...) instead of starting one."
        ),
    ] = "",
    base_port: Annotated[
        int,
        typer.Option(
            "--base-port",
            min=0,
            max=65535,
            help="Consecutive ports from here: ZooKeeper, bookies, then native, Kafka, Pulsar "
            "and HTTP of each broker (0: free ports, kept in DIR/cluster.json).",
        ),
    ] = 0,
    zk_root: ZkRoot = DEFAULT_ROOT,
) -> None:
    """Start a cluster on loopback (ZooKeeper, bookies, brokers), print each broker's
    endpoints once every broker has joined; SIGTERM / Ctrl-C stops every process it
    started. For development and tests, not production (see docs/cluster.md)."""
    from weir.cli.cluster_up import cluster_up as run_cluster

    status = run_cluster(data_dir, brokers, bookies, zk_root, zookeeper, base_port)
    if status:
        raise typer.Exit(status)


@cluster_app.command("audit")
def cluster_audit(
    zk: Zk = "127.0.0.1:2181", zk_root: ZkRoot = DEFAULT_ROOT, json: Json = False
) -> None:
    """Re-replicate closed ledgers' entries held by bookies no longer registered (lost);
    refused while an elected auditor (weir cluster auditor) runs."""
    from weir.replication.ledger.auditor_election import audit_once_exclusively

    async def body(client: LedgerClient) -> dict[int, list[str]]:
        return await audit_once_exclusively(client, _operator())

    fixed = _with_client(zk, zk_root, body)
    if json:
        output.print_json({str(k): v for k, v in fixed.items()})
        return
    if not fixed:
        output.stdout.out("every closed ledger has its bookies")
    for lid, lost in sorted(fixed.items()):
        output.stdout.out(f"ledger {lid}: re-replicated the entries of {' '.join(lost)}")


@cluster_app.command("auditor")
def cluster_auditor(
    zk: Zk = "127.0.0.1:2181",
    zk_root: ZkRoot = DEFAULT_ROOT,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between audits while leading.")
    ] = 10.0,
    grace: Annotated[
        float,
        typer.Option("--grace", help="Seconds a bookie must be gone before its share is copied."),
    ] = 60.0,
    identifier: Annotated[
        str, typer.Option("--id", help="This auditor's name in the election (host:pid).")
    ] = "",
) -> None:
    """Run an auditor until SIGTERM / Ctrl-C: the elected one of several re-replicates
    the share of lost bookies, the others stand by to take over."""
    import logging
    import os
    import socket

    from weir.replication.ledger.auditor_election import ElectedAuditor

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("weir.replication").setLevel(logging.INFO)
    name = identifier or f"{socket.gethostname()}:{os.getpid()}"

    async def body(client: LedgerClient) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await ElectedAuditor(client, name).run(interval, grace, stop)

    _with_client(zk, zk_root, body)
