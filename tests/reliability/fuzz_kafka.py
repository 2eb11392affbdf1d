"""atheris harness: the Kafka request decoder and record batch parser (the C extension)
must answer any bytes with KafkaCodecError / RecordsError or a result.

python tests/reliability/fuzz_kafka.py -max_total_time=60 CORPUS_DIR
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from weir.protocols.kafka import messages as m
    from weir.protocols.kafka.codec import KafkaCodecError, decode_request
    from weir.protocols.kafka.mapping import to_weir
    from weir.protocols.kafka.records import RecordsError, parse_batches
    from weir.storage.incoming import validate_incoming


def one_input(data: bytes) -> None:
    if not data:
        return
    if data[0] & 1:  # odd first byte: a record batch; even: a request frame
        try:
            for batch in parse_batches(data[1:], 1 << 20):
                # what the front stores must be a batch weir's own checks accept
                validate_incoming([to_weir(batch, "kafka-1", 0)])
        except RecordsError:
            pass
    else:
        with contextlib.suppress(KafkaCodecError):
            decode_request(m.BY_KEY, data[1:])


def main() -> None:
    corpus = next((a for a in reversed(sys.argv[1:]) if not a.startswith("-")), None)
    if corpus is not None:
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from tests.kafka_fuzz import sample_batches, sample_frames

        for i, seed in enumerate(sample_batches()):
            Path(corpus, f"batch-{i}").write_bytes(b"\x01" + seed)
        for i, seed in enumerate(sample_frames()):
            Path(corpus, f"frame-{i}").write_bytes(b"\x00" + seed)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
