"""Regenerate (or check) the committed Python code of pulsar_api.proto.

python -m weir.protocols.pulsar.codegen          # rewrite pulsar_api_pb2.py(i)
python -m weir.protocols.pulsar.codegen --check  # exit 1 if the committed code is stale
"""

from __future__ import annotations

from pathlib import Path

from weir.protocols.protoc import ProtoFile

PROTO = ProtoFile(
    Path(__file__).resolve().parent / "pulsar_api.proto",
    ("pulsar_api_pb2.py", "pulsar_api_pb2.pyi"),
)

if __name__ == "__main__":
    raise SystemExit(PROTO.main(__doc__))
