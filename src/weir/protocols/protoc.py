"""Regenerate (or check) the committed Python code of a front's .proto file.

Each front with a .proto has a ``codegen`` module naming its file and outputs; this runs
protoc for it. Needs the test extras (grpcio-tools for protoc, mypy-protobuf); the
server only needs the generated files.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]  # .../src


@dataclass(frozen=True)
class ProtoFile:
    """One .proto and the files protoc makes of it, committed beside it."""

    proto: Path
    outputs: tuple[str, ...]
    grpc: bool = False  # also the gRPC stubs (<name>_pb2_grpc.py)

    def generate(self, out_root: Path) -> Path:
        """Run protoc rooted at src/, so the code imports `weir.protocols....`."""
        rel = self.proto.relative_to(SRC)
        plugin = shutil.which("protoc-gen-mypy") or str(
            Path(sys.executable).parent / "protoc-gen-mypy"
        )
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--plugin=protoc-gen-mypy={plugin}",
            f"-I{SRC}",
            f"--python_out={out_root}",
            f"--mypy_out={out_root}",
        ]
        if self.grpc:
            cmd.append(f"--grpc_python_out={out_root}")
        subprocess.run([*cmd, str(rel)], check=True, cwd=SRC)
        return out_root / rel.parent

    def main(self, doc: str | None) -> int:
        """The command line: rewrite the outputs, or ``--check`` that they are fresh."""
        ap = argparse.ArgumentParser(
            description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        ap.add_argument(
            "--check",
            action="store_true",
            help="compare with the committed files instead of writing",
        )
        args = ap.parse_args()
        here = self.proto.parent
        with tempfile.TemporaryDirectory() as tmp:
            gen = self.generate(Path(tmp))
            stale = [
                n
                for n in self.outputs
                if not (here / n).exists() or (gen / n).read_bytes() != (here / n).read_bytes()
            ]
            if args.check:
                if stale:
                    print(
                        f"stale generated code: {', '.join(stale)}; run `make proto`",
                        file=sys.stderr,
                    )
                    return 1
                return 0
            for n in self.outputs:
                shutil.copyfile(gen / n, here / n)
            print(f"wrote {', '.join(self.outputs)}")
        return 0
