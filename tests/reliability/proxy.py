"""A TCP proxy on loopback that can cut every connection at once (client connections dropped mid-stream)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class FaultyProxy:
    """Listens on 127.0.0.1:<ephemeral>, forwards to 127.0.0.1:<target_port()>."""

    def __init__(self, target_port: Callable[[], int]) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self.drops = 0
        threading.Thread(target=self._accept, name="faulty-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port()), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._close(src)
            self._close(dst)

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.discard(s)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            s.close()

    def drop_all(self) -> int:
        """Cut every open connection in both directions; returns how many sockets were cut."""
        with self._lock:
            conns = list(self._conns)
        for s in conns:
            self._close(s)
        self.drops += 1
        return len(conns)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop_all()
