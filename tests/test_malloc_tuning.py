"""weir.malloc_tuning: with it, a server reuses freed request-sized buffers instead of
having the kernel map and zero fresh pages for every one (page faults: CPU a 10 KB
produce pays per message)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

# Request-sized buffers made and freed over and over, on the main thread and on a second
# one (the group commit's thread has its own malloc arena); prints the minor page faults.
CHURN = """
import os, resource, sys, threading
from weir.malloc_tuning import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
def churn():
    for i in range(40):
        bufs = [bytearray((1 << 20) + 4096 * k + i) for k in range(4)]
        del bufs
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
t = threading.Thread(target=churn)
t.start()
t.join()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _faults(mode: str) -> int:
    env = {"PATH": "/usr/bin:/bin"}  # no GLIBC_TUNABLES from the caller
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, env=env, check=True
    )
    return int(out.stdout.split()[-1])


def test_freed_buffers_are_reused_not_faulted_in_again() -> None:
    plain, tuned = _faults("plain"), _faults("tuned")
    # 320 buffers of 1 MB: faulted in afresh they are ~80,000 faults
    assert plain > 20_000
    assert tuned * 10 < plain


def test_operator_tunables_win() -> None:
    code = "from weir.malloc_tuning import keep_freed_memory; print(keep_freed_memory())"
    env = {"PATH": "/usr/bin:/bin", "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "False"
