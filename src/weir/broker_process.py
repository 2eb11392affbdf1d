"""`weir serve` as a child process on loopback: one broker of a development cluster
(`weir cluster up`), started, awaited until it listens, stopped by PID.

Every port is given (native gRPC, Kafka, Pulsar, HTTP), so the parent knows the
endpoints before the broker starts and a restart finds the same ones; the broker
announces each on stderr once it listens.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from weir.listening_process import ListeningProcess

_LISTEN = re.compile(r"weir listening on (\S+):(\d+)")


@dataclass(frozen=True)
class BrokerPorts:
    """The loopback ports of one broker's fronts."""

    native: int
    kafka: int
    pulsar: int
    http: int

    def all(self) -> dict[str, int]:
        return {
            "native": self.native,
            "kafka": self.kafka,
            "pulsar": self.pulsar,
            "http": self.http,
        }


class BrokerProcess(ListeningProcess):
    """``weir serve`` in replicated mode with its own data directory and ports."""

    stack_dump_signal = signal.SIGUSR1  # `weir serve` prints its stacks on it

    def __init__(
        self,
        broker_id: str,
        data_dir: Path,
        ports: BrokerPorts,
        *,
        cluster_env: Mapping[str, str],
    ) -> None:
        env = {
            **cluster_env,
            "WEIR_STORAGE_MODE": "replicated",
            "WEIR_CLUSTER_BROKER_ID": broker_id,
            "WEIR_KAFKA_LISTEN": f"127.0.0.1:{ports.kafka}",
            "WEIR_PULSAR_LISTEN": f"127.0.0.1:{ports.pulsar}",
            "WEIR_HTTP_LISTEN": f"127.0.0.1:{ports.http}",
        }
        super().__init__(f"broker {broker_id}", _LISTEN, env=env)
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.ports = ports
        self.port = ports.native

    @property
    def endpoints(self) -> dict[str, str]:
        """What a client of each front connects to."""
        return {
            "native": f"127.0.0.1:{self.ports.native}",
            "kafka": f"127.0.0.1:{self.ports.kafka}",
            "pulsar": f"pulsar://127.0.0.1:{self.ports.pulsar}",
            "http": f"http://127.0.0.1:{self.ports.http}",
        }

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "weir.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.ports.native}",
        ]
