"""A subscription consumer in a process of its own (tests/client/test_subscription_processes.py).

``python -m tests.client.subscription_worker ENDPOINT TOPIC SUBSCRIPTION TYPE MODE NAME QUEUE``
subscribes, prints ``{"ready": true}``, then one JSON line per message received
(``[partition, offset, key, redelivery_count]``), acknowledging each one individually
(MODE ``ack``), cumulatively (``cumulative``) or never (``hold``), until its stdin closes (then it closes the consumer)
or it is killed. A refused subscribe prints ``{"error": CLASS, "message": ...}`` and
exits with status 3."""

from __future__ import annotations

import json
import sys
import threading

import weir
from weir.errors import WeirError


def main(endpoint: str, topic: str, sub: str, type: str, mode: str, name: str, queue: int) -> int:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    with weir.Client(endpoint) as client:
        try:
            c = client.subscribe(
                topic,
                sub,
                type=type,
                initial_position="earliest",
                consumer_name=name,
                receiver_queue_size=queue,
            ).wait_connected()
        except WeirError as err:
            print(json.dumps({"error": type_name(err), "message": str(err)}), flush=True)
            return 3
        print(json.dumps({"ready": True}), flush=True)
        while not stop.is_set():
            for m in c.receive_batch(100, timeout=0.1):
                print(
                    json.dumps([m.partition, m.offset, m.key.decode(), m.redelivery_count]),
                    flush=True,
                )
                if mode == "ack":
                    c.acknowledge(m)
                elif mode == "cumulative":
                    c.acknowledge_cumulative(m)
        c.close()
    return 0


def type_name(err: BaseException) -> str:
    return type(err).__name__


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], a[1], a[2], a[3], a[4], a[5], int(a[6])))
