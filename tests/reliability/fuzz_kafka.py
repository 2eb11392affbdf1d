"""atheris harness: the Kafka request decoder, the record batch parser and the record
builder (the C extension, both ways) must answer any bytes with KafkaCodecError /
RecordsError / ValueError or a result; what the builder builds the parser accepts.

python tests/reliability/fuzz_kafka.py -max_total_time=60 CORPUS_DIR
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from weir.protocols.kafka import messages as m
    from weir.protocols.kafka._records import build_records
    from weir.protocols.kafka.codec import KafkaCodecError, decode_request
    from weir.protocols.kafka.mapping import to_weir
    from weir.protocols.kafka.records import NULL_KEY, RecordsError, frame_into, parse_batches
    from weir.storage.incoming import validate_incoming


def build(data: bytes) -> None:
    """A weir payload (flags, count, bytes) -> Kafka records; the result must parse."""
    if len(data) < 3:
        return
    flags, count = data[0] & 0x3F, data[1]
    try:
        batch, base_ts, max_ts = build_records(data[2:], flags, count, 1000, NULL_KEY)
    except ValueError:
        return
    if count:
        frame_into(batch, 0, count, base_ts, max_ts)
        (parsed,) = parse_batches(batch)
        assert parsed.count == count


def one_input(data: bytes) -> None:
    if not data:
        return
    if data[0] % 4 == 2:  # a weir payload for the record builder
        build(data[1:])
    elif data[0] & 1:  # odd first byte: a record batch; else: a request frame
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
        from weir.storage.batch import parse_header

        for i, seed in enumerate(sample_batches()):  # their stored payloads, for the builder
            with contextlib.suppress(RecordsError):
                for j, b in enumerate(parse_batches(seed)):
                    stored = bytes(to_weir(b))
                    h = parse_header(stored)
                    if h.codec == 0 and h.record_count < 256:
                        head = bytes([2, h.flags, h.record_count])
                        Path(corpus, f"payload-{i}-{j}").write_bytes(
                            head + stored[h.payload_start :]
                        )
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
