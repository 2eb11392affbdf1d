"""One consumer group member in its own process (for the rebalance tests): prints its
assignment as a line ``ASSIGNED 0,3`` on every change, and ``GOT n`` as messages arrive."""

from __future__ import annotations

import sys

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, topic, group = sys.argv[1:4]
    owned: set[int] = set()

    def show() -> None:
        print("ASSIGNED " + ",".join(map(str, sorted(owned))), flush=True)

    def on_assign(consumer: Consumer, partitions: list) -> None:
        owned.update(p.partition for p in partitions)
        show()

    def on_revoke(consumer: Consumer, partitions: list) -> None:
        owned.difference_update(p.partition for p in partitions)
        show()

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 300,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
        }
    )
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    got = 0
    while True:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
            if got % 10 == 0:
                print(f"GOT {got}", flush=True)


if __name__ == "__main__":
    main()
