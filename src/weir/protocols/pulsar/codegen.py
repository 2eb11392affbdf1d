"""Regenerate (or check) the committed Python code of pulsar_api.proto.

    python -m weir.protocols.pulsar.codegen          # rewrite pulsar_api_pb2.py(i)
    python -m weir.protocols.pulsar.codegen --check  # exit 1 if the committed code is stale

Needs the test extras (grpcio-tools for protoc, mypy-protobuf); the server only needs
the generated files.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2]  # .../src
PROTO = HERE / "pulsar_api.proto"
OUTPUTS = ("pulsar_api_pb2.py", "pulsar_api_pb2.pyi")


def generate(out_root: Path) -> Path:
    """Run protoc with the .proto rooted at src/, so imports read `weir.protocols.pulsar...`."""
    rel = PROTO.relative_to(SRC)
    plugin = shutil.which("protoc-gen-mypy") or str(Path(sys.executable).parent / "protoc-gen-mypy")
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--plugin=protoc-gen-mypy={plugin}",
        f"-I{SRC}",
        f"--python_out={out_root}",
        f"--mypy_out={out_root}",
        str(rel),
    ]
    subprocess.run(cmd, check=True, cwd=SRC)
    return out_root / rel.parent


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--check", action="store_true", help="compare with the committed files instead of writing"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        gen = generate(Path(tmp))
        stale = [
            n
            for n in OUTPUTS
            if not (HERE / n).exists() or (gen / n).read_bytes() != (HERE / n).read_bytes()
        ]
        if args.check:
            if stale:
                print(
                    f"stale generated code: {', '.join(stale)}; run `make proto`", file=sys.stderr
                )
                return 1
            return 0
        for n in OUTPUTS:
            shutil.copyfile(gen / n, HERE / n)
        print(f"wrote {', '.join(OUTPUTS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
