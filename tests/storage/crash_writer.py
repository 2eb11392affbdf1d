"""Child process of the crash test: writes to 4 partitions as fast as it can and prints
an ACK line for every durable write. Killed with SIGKILL at random moments. A third
argument "journal" opens the store with the journal in front of LMDB."""

from __future__ import annotations

import os
import random
import sys
import threading

from weir.storage.batch_encoding import encode_batch
from weir.storage.incoming import validate_incoming
from weir.storage.partition import PartitionConfig
from weir.storage.store import Store

CFG = PartitionConfig(low_watermark=64 << 10, max_blob_size=128 << 10, head_merge_fanout=4)
PARTITIONS = 4


def main(path: str, seed: int, journal: bool = False) -> None:
    store = Store(path, journal=journal)
    out_lock = threading.Lock()
    logs = [store.open_partition(p, CFG, label=f"crash/{p}") for p in range(PARTITIONS)]
    sys.stdout.write("READY\n")
    sys.stdout.flush()

    def run(p: int) -> None:
        rng = random.Random(seed * 31 + p)
        log = logs[p]
        producer = f"w{p}"
        last = log.last_seq_no(producer) or 0
        # resend a few already stored messages first, as a reconnecting client would
        seq = max(1, last - rng.randint(0, 20) + 1)
        while True:
            n = rng.randint(1, 200)
            size = rng.choice((10, 100, 1000))
            data = [f"{producer}:{seq + i}:".encode() + os.urandom(size) for i in range(n)]
            batch = encode_batch(data, producer_id=producer, first_seq_no=seq)
            (res,) = log.write(validate_incoming([batch]))
            if res.written:
                with out_lock:
                    lo = seq + res.skipped
                    sys.stdout.write(f"ACK {p} {producer} {lo} {seq + n - 1} {res.offset}\n")
                    sys.stdout.flush()
            seq += n

    threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in range(PARTITIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)  # bounded: the parent kills us long before


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["journal"])
