"""Print the README's coverage table from the data `make coverage` leaves (.coverage).

    .venv/bin/python tools/coverage_table.py [--below 85]

One row per package of src/weir: its lines, the share covered, and the modules under
``--below`` percent (the ones worth a look), so the table stays short as weir grows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--below", type=float, default=85.0, help="list modules under this %%")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        subprocess.run([sys.executable, "-m", "coverage", "json", "-q", "-o", str(out)], check=True)
        files = json.loads(out.read_text())["files"]
    packages: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for path, data in files.items():
        rel = Path(path.split("src/weir/", 1)[-1])
        package = "weir" if len(rel.parts) == 1 else "/".join(rel.parts[:-1])
        s = data["summary"]
        packages[package].append((rel.stem, s["num_statements"], s["covered_lines"]))
    total = sum(n for mods in packages.values() for _, n, _ in mods)
    covered = sum(c for mods in packages.values() for _, _, c in mods)
    print(f"Line coverage of `src/weir`: {100 * covered / total:.0f}% of {total} lines.\n")
    print(f"| package | lines | covered | modules below {args.below:g}% |")
    print("|---|---:|---:|---|")
    for package in sorted(packages):
        mods = packages[package]
        n = sum(m[1] for m in mods)
        c = sum(m[2] for m in mods)
        low = [
            f"{name} {round(100 * mc / mn)}"
            for name, mn, mc in sorted(mods)
            if mn and round(100 * mc / mn) < args.below  # as shown
        ]
        pct = 100 * c / n if n else 100.0
        print(f"| `{package}` | {n} | {pct:.0f}% | {', '.join(low) or '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
