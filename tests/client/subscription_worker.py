"""A subscription consumer in a process of its own (tests/client/test_subscription_processes.py).

``python -m tests.client.subscription_worker ENDPOINT TOPIC SUBSCRIPTION TYPE MODE NAME QUEUE
[ACK_TIMEOUT [MAX_REDELIVER_COUNT]]``
subscribes (with that ack timeout in seconds and a dead-letter policy of that count, when
given and not 0), prints ``{"ready": true}``, then one JSON line per message received
(``[partition, offset, key, redelivery_count]``), acknowledging each one individually
(MODE ``ack``), cumulatively (``cumulative``), negatively (``nack``: delivered again at
once, its count raised) or never (``hold``), until its stdin closes (then it closes the
consumer) or it is killed. A refused subscribe prints ``{"error": CLASS, "message": ...}`` and
exits with status 3."""

from __future__ import annotations

import json
import sys
import threading

import weir
from weir.errors import WeirError


def main(
    endpoint: str,
    topic: str,
    sub: str,
    type: str,
    mode: str,
    name: str,
    queue: int,
    ack_timeout: float = 0,
    max_redeliver_count: int = 0,
) -> int:
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
                ack_timeout=ack_timeout or None,
                dead_letter_policy=weir.DeadLetterPolicy(max_redeliver_count)
                if max_redeliver_count
                else None,
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
                elif mode == "nack":
                    c.negative_acknowledge(m)
        c.close()
    return 0


def type_name(err: BaseException) -> str:
    return type(err).__name__


if __name__ == "__main__":
    a = sys.argv[1:]
    ack_timeout = float(a[7]) if len(a) > 7 else 0.0
    max_redeliver_count = int(a[8]) if len(a) > 8 else 0
    sys.exit(main(*a[:6], int(a[6]), ack_timeout, max_redeliver_count))
