"""Write order events into the `orders` topic: the source of the example pipeline.

    python examples/orders_producer.py [--orders 50000] [--customers 50] [--minutes 30] [--follow]

Each order is a small JSON document keyed by its customer, so one customer's
orders stay in one partition and in order. Event times (created_at) are
spread over the last --minutes minutes; with --follow the script then keeps
writing about --rate orders a second, stamped now, until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import random
import time

import crc32c
from common import ORDERS, TOTALS, arguments

import weir
from weir.errors import AlreadyExistsError

PARTITIONS = 4


def ensure_topics(client: weir.Client) -> None:
    for name, partitions in ((ORDERS, PARTITIONS), (TOTALS, 2)):
        with contextlib.suppress(AlreadyExistsError):
            client.create_topic(name, partitions=partitions)


def order(i: int, customers: int, rng: random.Random) -> tuple[bytes, bytes]:
    customer = f"c{rng.randrange(customers):03d}"
    doc = {
        "order_id": i,
        "customer": customer,
        "items": rng.randint(1, 5),
        "amount": round(rng.uniform(5, 250), 2),
    }
    return customer.encode(), json.dumps(doc).encode()


def main() -> None:
    ap = arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--orders", type=int, default=50_000)
    ap.add_argument("--customers", type=int, default=50)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--follow", action="store_true", help="then keep writing until Ctrl-C")
    ap.add_argument("--rate", type=float, default=200.0, help="orders per second with --follow")
    args = ap.parse_args()

    rng = random.Random(42)
    with weir.Client(args.endpoint) as client:
        ensure_topics(client)
        # one producer per partition; the key decides the partition, like the Spark sink does
        writers = [
            client.writer(ORDERS, producer_id=f"orders-producer-{p}", partition=p)
            for p in range(PARTITIONS)
        ]
        start_ms = int(time.time() * 1000 - args.minutes * 60_000)
        step_ms = args.minutes * 60_000 / max(1, args.orders)
        t = time.monotonic()
        for i in range(args.orders):
            key, value = order(i, args.customers, rng)
            w = writers[crc32c.crc32c(key) % PARTITIONS]
            w.write(value, key=key, created_at=int(start_ms + i * step_ms))
        for w in writers:
            w.flush()
        print(f"wrote {args.orders:,} orders in {time.monotonic() - t:.1f} s to {ORDERS!r}")
        i = args.orders
        try:
            while args.follow:
                tick = time.monotonic()
                for _ in range(max(1, int(args.rate))):
                    key, value = order(i, args.customers, rng)
                    writers[crc32c.crc32c(key) % PARTITIONS].write(value, key=key)
                    i += 1
                for w in writers:
                    w.flush()
                print(f"\r{i:,} orders written", end="", flush=True)
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        except KeyboardInterrupt:
            print()
        for w in writers:
            w.close()


if __name__ == "__main__":
    main()
