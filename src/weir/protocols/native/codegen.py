"""Regenerate (or check) the committed Python code of weir.proto.

python -m weir.protocols.native.codegen          # rewrite weir_pb2*.py(i)
python -m weir.protocols.native.codegen --check  # exit 1 if the committed code is stale
"""

from __future__ import annotations

from pathlib import Path

from weir.protocols.protoc import ProtoFile

PROTO = ProtoFile(
    Path(__file__).resolve().parent / "weir.proto",
    ("weir_pb2.py", "weir_pb2.pyi", "weir_pb2_grpc.py"),
    grpc=True,
)

if __name__ == "__main__":
    raise SystemExit(PROTO.main(__doc__))
