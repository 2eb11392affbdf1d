"""atheris harness: the batch decoder must answer any bytes with BatchFormatError or a valid result.

python tests/reliability/fuzz_batch.py -max_total_time=60
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from weir.errors import BatchFormatError
    from weir.storage.batch import decode_records
    from weir.storage.batch_encoding import encode_batch
    from weir.storage.codecs import Codec
    from weir.storage.incoming import validate_incoming

SEEDS = [
    encode_batch([b"a", b"bc"], producer_id="p", first_seq_no=1),
    encode_batch(
        [b"x" * 50] * 3,
        producer_id="q",
        seq_nos=[1, 5, 9],
        keys=[b"k", b"", b"kk"],
        headers=[{"h": "v"}, None, {}],
        codec=Codec.GZIP,
        created_at=[1, 2, 3],
    ),
    encode_batch([b"y" * 10] * 4, codec=Codec.ZSTD),
    encode_batch([b"z"], codec=Codec.LZ4),
]


def one_input(data: bytes) -> None:
    try:
        (inc,) = validate_incoming([data])
        recs = decode_records(inc.buf)
        assert len(recs) == inc.header.record_count
    except BatchFormatError:
        pass


def main() -> None:
    # seed the corpus (the last argument, a directory) with valid batches of every shape
    corpus = next((a for a in reversed(sys.argv[1:]) if not a.startswith("-")), None)
    if corpus is not None:
        from pathlib import Path

        for i, seed in enumerate(SEEDS):
            Path(corpus, f"seed-{i}").write_bytes(seed)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
