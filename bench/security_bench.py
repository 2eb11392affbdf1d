"""What TLS and authentication cost: the same produce / consume run against a plain server,
a TLS server, and a TLS server with a logged-in user and grants checked.

    python bench/security_bench.py [--messages 200000] [--size 100] [--rounds 2]

Each setup gets its own `weir serve` child process on loopback with a fresh data
directory (acks after fsync, as always); one writer sends N messages of S bytes, then one
range reader reads them back. The certificates come from a throwaway CA made with
`cryptography` (tests/security/certs.py). Prints one line per setup and round.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import weir  # noqa: E402
from tests.conftest import ServerProcess  # noqa: E402
from tests.security.certs import Authority  # noqa: E402

ADMIN, PASSWORD = "bench", "bench-password"
ROOT_PASSWORD = "root-password"


def run(endpoint: str, n: int, size: int, **client: object) -> tuple[float, float]:
    """(messages/s written, messages/s read) for one writer and one range reader."""
    payload = b"x" * size
    with weir.Client(endpoint, **client) as c:
        c.create_topic("bench", partitions=1)
        t0 = time.perf_counter()
        with c.writer("bench", partition=0) as w:
            for _ in range(n):
                w.write(payload)
            w.flush(timeout=300)
        wrote = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = 0
        for chunk in c.read_range("bench", 0, 0, n):
            got += len(chunk.messages())
        read = time.perf_counter() - t0
        assert got == n, got
        c.drop_topic("bench")
    return n / wrote, n / read


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        ca = Authority(d / "ca")
        cert = ca.issue("bench-server", stem="server")
        tls_env = {"WEIR_TLS_CERT_FILE": str(cert.cert), "WEIR_TLS_KEY_FILE": str(cert.key)}
        auth_env = {
            **tls_env,
            "WEIR_AUTH_USERS": f"{ADMIN}:{PASSWORD},root:{ROOT_PASSWORD}",
            "WEIR_AUTH_ALLOW_ANONYMOUS": "false",
            "WEIR_AUTH_SUPERUSERS": "root",
        }
        setups: list[tuple[str, dict[str, str], dict[str, object]]] = [
            ("plain", {}, {}),
            ("tls", tls_env, {"tls": weir.Tls(ca=ca.path)}),
            (
                "tls+auth+grants",
                auth_env,
                {"tls": weir.Tls(ca=ca.path), "credentials": (ADMIN, PASSWORD)},
            ),
        ]
        print(f"{args.messages} messages of {args.size} B, one writer, one range reader")
        for name, env, client in setups:
            srv = ServerProcess(d / f"data-{name}", env=env)
            srv.start()
            try:
                if name == "tls+auth+grants":
                    # the bench user may produce, consume and administer this topic only
                    creds = ("root", ROOT_PASSWORD)
                    with weir.Client(
                        srv.endpoint, tls=weir.Tls(ca=ca.path), credentials=creds
                    ) as r:
                        for permission in ("produce", "consume", "admin"):
                            r.grant(ADMIN, permission, "bench")
                for r in range(args.rounds):
                    w, rd = run(srv.endpoint, args.messages, args.size, **client)
                    print(
                        f"{name:16s} round {r + 1}: write {w:10,.0f} msg/s   read {rd:10,.0f} msg/s"
                    )
            finally:
                srv.stop()


if __name__ == "__main__":
    main()
