"""Regenerate (or check) the committed Python code of weir.proto.

    python -m weir.protocols.native.codegen          # rewrite weir_pb2*.py(i)
    python -m weir.protocols.native.codegen --check  # exit 1 if the committed code is stale

Needs the test extras (grpcio-tools, mypy-protobuf); the server only needs the
generated files.
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
PROTO = HERE / "weir.proto"
OUTPUTS = ("weir_pb2.py", "weir_pb2.pyi", "weir_pb2_grpc.py")


def generate(out_root: Path) -> Path:
    """Run protoc with weir.proto rooted at src/, so imports read `weir.protocols.native...`."""
    rel = PROTO.relative_to(SRC)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{SRC}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        str(rel),
    ]
    plugin = shutil.which("protoc-gen-mypy") or str(Path(sys.executable).parent / "protoc-gen-mypy")
    cmd.insert(3, f"--plugin=protoc-gen-mypy={plugin}")
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
