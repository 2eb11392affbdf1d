"""A TCP proxy on loopback that can cut every connection at once (client connections dropped
mid-stream), refuse new ones for a while, hold them, or slow what goes through, and keeps a log of every connection it handled (when it was accepted, how long
its upstream connect took and how it ended, how many bytes went each way, who closed it)."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

UPSTREAM_CONNECT_TIMEOUT_S = 5.0


@dataclass
class ConnRecord:
    """One client connection through the proxy; times are time.monotonic()."""

    id: int
    client: str  # the client's address (host:port), to tell its connections apart
    accepted: float
    upstream_port: int = 0
    connected: float | None = None  # upstream connect answered (or failed)
    upstream_error: str = ""  # why the upstream connect failed ("" if it did not)
    ended: float | None = None
    ended_by: str = ""  # "client eof", "server eof", "client error: ...", "drop", "close"
    up_bytes: int = 0  # client -> server
    muted: bool = False  # server -> client bytes are swallowed (`mute_replies`)
    down_bytes: int = 0  # server -> client
    sockets: list[socket.socket] = field(default_factory=list, repr=False)

    def line(self, t0: float) -> str:
        def at(t: float | None) -> str:
            return "-" if t is None else f"{t - t0:.3f}"

        connect = "-" if self.connected is None else f"{self.connected - self.accepted:.3f}"
        return (
            f"conn {self.id} from {self.client} accepted {at(self.accepted)} "
            f"upstream :{self.upstream_port} connect {connect}s"
            f"{' FAILED ' + self.upstream_error if self.upstream_error else ''} "
            f"ended {at(self.ended)} by {self.ended_by or '-'} "
            f"up {self.up_bytes} B down {self.down_bytes} B"
        )


class FaultyProxy:
    """Listens on 127.0.0.1:<ephemeral>, forwards to 127.0.0.1:<target_port()>.

    ``log``: a file to which a line per connection is written when it ends (and per
    drop); the last ``keep`` records are also kept in memory (`records`)."""

    def __init__(
        self, target_port: Callable[[], int], log: Path | None = None, keep: int = 5000
    ) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self.drops = 0
        self.t0 = time.monotonic()
        self._ids = itertools.count(1)
        self.records: deque[ConnRecord] = deque(maxlen=keep)
        self._open: dict[int, ConnRecord] = {}
        self._log: TextIO | None = log.open("a", buffering=1) if log is not None else None
        self._log_lock = threading.Lock()
        self._holding = False
        self._refusing = False
        self.delay_s = 0.0  # each chunk forwarded (either way) waits this long first (`slow`)
        self._parked: list[tuple[socket.socket, ConnRecord]] = []
        threading.Thread(target=self._accept, name="faulty-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def note(self, text: str) -> None:
        """A line in the connection log (faults, for instance), with the proxy's clock."""
        with self._log_lock:
            if self._log is not None:
                with contextlib.suppress(ValueError, OSError):
                    self._log.write(f"{time.monotonic() - self.t0:.3f} {text}\n")

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, addr = self._listener.accept()
            except OSError:
                return
            rec = ConnRecord(next(self._ids), f"{addr[0]}:{addr[1]}", time.monotonic())
            with self._lock:
                refused = self._refusing
                if refused:
                    rec.ended, rec.ended_by = time.monotonic(), "refused"
                    self.records.append(rec)
                else:
                    self._open[rec.id] = rec
                    if self._holding:
                        self._parked.append((client, rec))
                        continue
            if refused:
                self._close(client)
                continue
            self._forward(client, rec)

    def _forward(self, client: socket.socket, rec: ConnRecord) -> None:
        """Connect an accepted client upstream and pump both ways."""
        try:
            rec.upstream_port = self.target_port()
            upstream = socket.create_connection(
                ("127.0.0.1", rec.upstream_port), timeout=UPSTREAM_CONNECT_TIMEOUT_S
            )
            upstream.settimeout(None)
        except OSError as err:
            rec.connected = time.monotonic()
            rec.upstream_error = repr(err)
            client.close()
            self._ended(rec, "upstream connect failed")
            return
        rec.connected = time.monotonic()
        rec.sockets = [client, upstream]
        with self._lock:
            refused = self._refusing  # `refuse` came while this one connected upstream
            if not refused:
                self._conns.update((client, upstream))
        if refused:
            self._ended(rec, "refused")
            self._close(client)
            self._close(upstream)
            return
        for a, b, up in ((client, upstream, True), (upstream, client, False)):
            threading.Thread(target=self._pump, args=(rec, a, b, up), daemon=True).start()

    def _pump(self, rec: ConnRecord, src: socket.socket, dst: socket.socket, up: bool) -> None:
        why = "client eof" if up else "server eof"
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if rec.muted and not up:
                    continue  # swallowed: the server's answers never reach the client
                if self.delay_s > 0:
                    time.sleep(self.delay_s)  # a slow link (this pump's thread only)
                dst.sendall(data)
                if up:
                    rec.up_bytes += len(data)
                else:
                    rec.down_bytes += len(data)
        except OSError as err:
            why = f"{'client' if up else 'server'} side error {err!r}"
        finally:
            self._ended(rec, why)
            self._close(src)
            self._close(dst)

    def _ended(self, rec: ConnRecord, why: str) -> None:
        with self._lock:
            if rec.ended is not None:
                return
            rec.ended = time.monotonic()
            rec.ended_by = why
            self._open.pop(rec.id, None)
            self.records.append(rec)
        self.note(rec.line(self.t0))

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.discard(s)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            s.close()

    def open_connections(self) -> list[ConnRecord]:
        """Connections not ended yet (including one whose upstream connect is under way)."""
        with self._lock:
            return list(self._open.values())

    def hold(self) -> None:
        """From now on accept connections but park them: neither forwarded nor closed (a
        server that is unreachable while the client's connection attempts hang)."""
        with self._lock:
            self._holding = True

    def release(self) -> None:
        """Stop holding: parked connections (and new ones) are forwarded. Returns at once."""
        with self._lock:
            self._holding = False
            parked, self._parked = self._parked, []
        for client, rec in parked:
            threading.Thread(target=self._forward, args=(client, rec), daemon=True).start()

    def refuse(self) -> int:
        """Cut every open connection and, from now on, close each new one at once (the
        far side unreachable: connects fail fast) until `admit`. Returns the sockets cut."""
        with self._lock:
            self._refusing = True
        return self.drop_all()

    def admit(self) -> None:
        """Stop refusing: new connections are forwarded again."""
        with self._lock:
            self._refusing = False

    def slow(self, delay_s: float) -> None:
        """Delay every chunk forwarded from now on by ``delay_s`` (0: full speed again)."""
        self.delay_s = delay_s

    def mute_replies(self) -> int:
        """From now on swallow what the server sends on the connections open now (its acks
        are lost in flight; new connections are not affected): a connection muted so is
        good only to be cut. Returns how many connections were muted."""
        with self._lock:
            recs = list(self._open.values())
        for rec in recs:
            rec.muted = True
        return len(recs)

    def drop_all(self) -> int:
        """Cut every open connection in both directions; returns how many sockets were cut."""
        with self._lock:
            conns = list(self._conns)
            recs = list(self._open.values())
            parked, self._parked = self._parked, []
        for client, rec in parked:
            self._ended(rec, "drop (parked)")
            self._close(client)
        for rec in recs:
            if rec.sockets:
                self._ended(rec, "drop")
        for s in conns:
            self._close(s)
        self.drops += 1
        self.note(f"drop #{self.drops}: {len(conns)} sockets cut")
        return len(conns)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop_all()
        with self._log_lock:
            if self._log is not None:
                with contextlib.suppress(OSError):
                    self._log.close()
                self._log = None
