"""Write order events into the `orders` topic: the source of the example pipeline.

    python examples/orders_producer.py [--orders 50000] [--customers 50] [--minutes 30] [--follow]

Each order is a small JSON document keyed by its customer. A weir writer
writes to one partition (keys do not route), so the script opens one writer per
partition and picks the writer by a hash of the key: one customer's orders
stay in one partition and in order. Event times (created_at) are spread over
the last --minutes minutes; with --follow the script then keeps writing about
--rate orders a second, stamped now, until Ctrl-C.

Order i is always the same order, written by the same producer with seq_no
i + 1, so running the script again writes nothing twice: the broker drops the
orders it already has (and a larger --orders adds only the new ones).
"""

from __future__ import annotations

import json
import random
import time

import crc32c
from common import ORDERS, PARTITIONS, arguments, ensure_topics

import weir


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
    partitions = PARTITIONS[ORDERS]
    ensure_topics(args.endpoint)  # checks the shape before a single write
    with weir.Client(args.endpoint) as client:
        before = client.describe_topic(ORDERS).messages
        # one producer per partition; the key picks the writer, like the Spark sink does
        writers = [
            client.writer(ORDERS, producer_id=f"orders-producer-{p}", partition=p)
            for p in range(partitions)
        ]
        start_ms = int(time.time() * 1000 - args.minutes * 60_000)
        step_ms = args.minutes * 60_000 / max(1, args.orders)
        t = time.monotonic()
        for i in range(args.orders):
            key, value = order(i, args.customers, rng)
            w = writers[crc32c.crc32c(key) % partitions]
            w.write(value, key=key, seq_no=i + 1, created_at=int(start_ms + i * step_ms))
        for w in writers:
            w.flush()
        stored = client.describe_topic(ORDERS).messages
        print(
            f"wrote {stored - before:,} orders in {time.monotonic() - t:.1f} s to {ORDERS!r} "
            f"({args.orders - (stored - before):,} of the {args.orders:,} were there already); "
            f"it holds {stored:,}"
        )
        # live orders go on after the last one any earlier run wrote
        i = max([args.orders] + [w.last_seq_no or 0 for w in writers])
        try:
            while args.follow:
                tick = time.monotonic()
                for _ in range(max(1, int(args.rate))):
                    key, value = order(i, args.customers, rng)
                    writers[crc32c.crc32c(key) % partitions].write(value, key=key, seq_no=i + 1)
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
