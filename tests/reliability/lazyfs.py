"""A FUSE file system that forgets what was not fsync'd: power loss for the server's data.

Jepsen's LazyFS idea, in Python (mfusepy over Debian's libfuse3): the server's
data directory is a mount of this file system over a backing directory on the
real disk. A write lands in this process's memory only (page by page, on top
of the backing file); ``fsync``/``fdatasync`` of the file, or a write through a
descriptor opened with ``O_DSYNC``/``O_SYNC`` (LMDB's meta page), copies the
file's pending pages to the backing file. A power cut (the ``cut`` command on
stdin) drops every pending page and blocks every later operation, so the server
sees no result of any I/O after the cut; the test then sends SIGKILL to the
server, ``release`` (the blocked operations fail with EIO, to a process that is
dying: a FUSE request already taken by this process holds even a killed caller
until it is answered), unmounts, mounts again on the backing directory and
restarts the server on exactly what was synced.

Modelled and not modelled:

- data writes and ``truncate`` are lazy (lost at a cut unless synced);
- name operations (create, mkdir, unlink, rename, symlink) reach the backing
  directory at once, as on a journaling file system whose metadata survives;
- a cut loses all unsynced pages of every file, not a random subset (no torn
  writes: a stricter model would also persist some of them).

LMDB's lock file (``lock.mdb``) is shared memory: every process maps it
read-write and keeps reader slots there; it is rebuilt when the first process
opens the environment, so nothing in it has to survive a power loss, and
writable shared mmaps on FUSE go through the kernel's writeback path, which
this layer does not model. The harness (`LazyMount`) therefore makes
``<data>/kv/lock.mdb`` a symlink to a file outside the mount, on the real disk.
``data.mdb`` is read by the server through a read-only ``mmap``: FUSE serves
that from the page cache it fills with our ``read`` (``direct_io`` is off), and
each remount starts with an empty cache, so after a cut the server sees only
the synced bytes.

Run as ``python -m tests.reliability.lazyfs BACKING MOUNT``; it prints
``ready`` once mounted and reads commands on stdin: ``cut`` (power loss),
``release`` (blocked operations fail), ``hold`` / ``unhold`` (fsync waits: a slow
disk), ``fail`` / ``unfail`` (fsync and O_DSYNC writes fail with EIO: a dying disk),
``waiting`` (fsyncs held), ``stats``; it exits when the mount is
unmounted (``fusermount3 -u MOUNT``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAGE = 4096
_SYNC_FLAGS = os.O_DSYNC | os.O_SYNC


@dataclass
class _Pending:
    """Unsynced state of one file: whole pages over the backing file, and its logical size."""

    pages: dict[int, bytearray] = field(default_factory=dict)
    size: int | None = None  # None: the backing file's size


@dataclass
class _Handle:
    fd: int
    path: str  # backing path
    sync_writes: bool  # opened with O_DSYNC / O_SYNC


def _make_ops() -> Any:
    import mfusepy  # imported here: the harness side must not need libfuse

    class LazyFS(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self, root: str) -> None:
            self.root = os.path.realpath(root)
            self.mutex = threading.RLock()
            self.pending: dict[str, _Pending] = {}
            self.handles: dict[int, _Handle] = {}
            self.next_fh = 1
            self.dead = False
            self.thawed = threading.Event()
            self.fsync_open = threading.Event()  # cleared by `hold`: fsync waits (a slow disk)
            self.fsync_open.set()
            self.fsyncs_waiting = 0
            self.failing = False  # set by `fail`: every fsync and O_DSYNC write fails with EIO
            self.fail_after_fsync = False  # set by `fail-after-fsync`: failing after the next
            self.failing_all = False  # set by `die-after-fsync`: then every write fails too
            self.syncs = 0
            self.cuts = 0
            self.dropped_pages = 0

        # ------------------------------------------------------------ helpers

        def _real(self, path: str) -> str:
            return os.path.join(self.root, path.lstrip("/"))

        def _alive(self) -> None:
            if self.dead:  # the power is off: nothing answers until `release`
                self.thawed.wait()
                raise mfusepy.FuseOSError(errno.EIO)

        def _size(self, real: str, fd: int | None = None) -> int:
            p = self.pending.get(real)
            if p is not None and p.size is not None:
                return p.size
            return os.fstat(fd).st_size if fd is not None else os.lstat(real).st_size

        def _load_page(self, fd: int, real: str, n: int) -> bytearray:
            """A pending page, created from the backing file (zeros past the logical size)."""
            p = self.pending.setdefault(real, _Pending())
            page = p.pages.get(n)
            if page is None:
                page = bytearray(os.pread(fd, PAGE, n * PAGE).ljust(PAGE, b"\0"))
                if p.size is not None and p.size < (n + 1) * PAGE:
                    keep = max(0, p.size - n * PAGE)
                    page[keep:] = bytes(PAGE - keep)
                p.pages[n] = page
            return page

        def _persist(self, fd: int, real: str, only: range | None = None) -> None:
            """Copy pending pages (all, or those in ``only``) to the backing file."""
            p = self.pending.get(real)
            if p is None:
                return
            size = p.size if p.size is not None else os.fstat(fd).st_size
            if only is None and p.size is not None:
                os.ftruncate(fd, p.size)
            numbers = sorted(p.pages) if only is None else [n for n in only if n in p.pages]
            for n in numbers:
                page = p.pages.pop(n)
                end = min(PAGE, size - n * PAGE)
                if end > 0:
                    os.pwrite(fd, memoryview(page)[:end], n * PAGE)
            if only is None or (not p.pages and (p.size is None or p.size == os.fstat(fd).st_size)):
                del self.pending[real]
            self.syncs += 1

        # ------------------------------------------------------------ control

        def cut(self) -> int:
            """Power loss: forget every unsynced page and size; all later I/O blocks."""
            with self.mutex:
                self.dead = True
                n = sum(len(p.pages) for p in self.pending.values())
                self.pending.clear()
                self.cuts += 1
                self.dropped_pages += n
                return n

        def stats(self) -> str:
            with self.mutex:
                pages = sum(len(p.pages) for p in self.pending.values())
                return (
                    f"syncs={self.syncs} pending_pages={pages} dropped_pages={self.dropped_pages}"
                )

        # ------------------------------------------------------------ metadata

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            with self.mutex:
                self._alive()
                real = self._real(path)
                try:
                    st = os.lstat(real)
                except OSError as e:
                    raise mfusepy.FuseOSError(e.errno) from None
                attrs = {
                    k: getattr(st, k)
                    for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")
                }
                attrs |= {
                    "st_atime": st.st_atime_ns,
                    "st_mtime": st.st_mtime_ns,
                    "st_ctime": st.st_ctime_ns,
                }
                p = self.pending.get(real)
                if p is not None and p.size is not None:
                    attrs["st_size"] = p.size
                return attrs

        def access(self, path: str, amode: int) -> int:
            self._alive()
            if not os.access(self._real(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        def readlink(self, path: str) -> str:
            self._alive()
            return os.readlink(self._real(path))

        def readdir(self, path: str, fh: int) -> list[str]:
            self._alive()
            return [".", "..", *os.listdir(self._real(path))]

        def mkdir(self, path: str, mode: int) -> int:
            self._alive()
            os.mkdir(self._real(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            self._alive()
            os.rmdir(self._real(path))
            return 0

        def symlink(self, target: str, source: str) -> int:
            self._alive()
            os.symlink(source, self._real(target))
            return 0

        def unlink(self, path: str) -> int:
            with self.mutex:
                self._alive()
                real = self._real(path)
                os.unlink(real)
                self.pending.pop(real, None)
                return 0

        def rename(self, old: str, new: str) -> int:
            with self.mutex:
                self._alive()
                a, b = self._real(old), self._real(new)
                os.rename(a, b)
                if a in self.pending:
                    self.pending[b] = self.pending.pop(a)
                for h in self.handles.values():
                    if h.path == a:
                        h.path = b
                return 0

        def chmod(self, path: str, mode: int) -> int:
            self._alive()
            os.chmod(self._real(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            self._alive()
            os.chown(self._real(path), uid, gid)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            self._alive()
            os.utime(self._real(path), ns=times)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            self._alive()
            st = os.statvfs(self._real(path))
            return {
                k: getattr(st, k)
                for k in (
                    "f_bavail",
                    "f_bfree",
                    "f_blocks",
                    "f_bsize",
                    "f_favail",
                    "f_ffree",
                    "f_files",
                    "f_flag",
                    "f_frsize",
                    "f_namemax",
                )
            }

        # ------------------------------------------------------------ files

        def _new_handle(self, real: str, flags: int, mode: int = 0o644) -> int:
            # the backing file is written only by `_persist`: no O_TRUNC / O_APPEND, and no
            # O_DSYNC (durability is what this layer models, not the real disk's)
            strip = os.O_TRUNC | os.O_APPEND | os.O_ACCMODE | _SYNC_FLAGS
            fd = os.open(real, (flags & ~strip) | os.O_RDWR, mode)
            with self.mutex:
                fh = self.next_fh
                self.next_fh += 1
                self.handles[fh] = _Handle(fd, real, bool(flags & _SYNC_FLAGS))
                if flags & os.O_TRUNC:
                    self._truncate(real, 0)
            return fh

        def open(self, path: str, flags: int) -> int:
            self._alive()
            return self._new_handle(self._real(path), flags)

        def create(self, path: str, mode: int, flags: int) -> int:
            self._alive()
            return self._new_handle(self._real(path), flags | os.O_CREAT, mode)

        def release(self, path: str, fh: int) -> int:
            with self.mutex:
                h = self.handles.pop(fh, None)
            if h is not None:
                os.close(h.fd)
            return 0

        def flush(self, path: str, fh: int) -> int:
            return 0  # close() is not a sync point

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            with self.mutex:
                self._alive()
                h = self.handles[fh]
                end = min(offset + size, self._size(h.path, h.fd))
                if end <= offset:
                    return b""
                p = self.pending.get(h.path)
                first, last = offset // PAGE, (end - 1) // PAGE
                if p is None or not any(n in p.pages for n in range(first, last + 1)):
                    data = os.pread(h.fd, end - offset, offset)
                    return data.ljust(end - offset, b"\0")
                out = bytearray()
                for n in range(first, last + 1):
                    page = p.pages.get(n)
                    if page is None:
                        page = bytearray(os.pread(h.fd, PAGE, n * PAGE).ljust(PAGE, b"\0"))
                    lo = offset - n * PAGE if n == first else 0
                    hi = end - n * PAGE if n == last else PAGE
                    out += page[lo:hi]
                return bytes(out)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            with self.mutex:
                self._alive()
                h = self.handles[fh]
                if self.failing and self.failing_all and not h.sync_writes:  # dead: takes nothing
                    raise mfusepy.FuseOSError(errno.EIO)
                end = offset + len(data)
                size = self._size(h.path, h.fd)
                pos = offset
                while pos < end:
                    n = pos // PAGE
                    page = self._load_page(h.fd, h.path, n)
                    lo = pos - n * PAGE
                    take = min(PAGE - lo, end - pos)
                    page[lo : lo + take] = data[pos - offset : pos - offset + take]
                    pos += take
                # a durable write the disk refuses: the page cache keeps the bytes, as Linux's
                if h.sync_writes and self.failing:
                    raise mfusepy.FuseOSError(errno.EIO)
                p = self.pending[h.path]
                if end > size or p.size is not None:
                    p.size = max(size, end)
                if h.sync_writes:  # O_DSYNC: this write is durable when it returns
                    self._persist(h.fd, h.path, range(offset // PAGE, (end - 1) // PAGE + 1))
                return len(data)

        def _truncate(self, real: str, length: int) -> None:
            p = self.pending.setdefault(real, _Pending())
            for n in [n for n in p.pages if n * PAGE >= length]:
                del p.pages[n]
            last = p.pages.get(length // PAGE)
            if last is not None:
                keep = length - (length // PAGE) * PAGE
                last[keep:] = bytes(PAGE - keep)
            p.size = length

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            with self.mutex:
                self._alive()
                real = self._real(path) if fh is None else self.handles[fh].path
                if length % PAGE:  # keep the bytes before the cut-off in the partial page
                    fd = os.open(real, os.O_RDONLY)
                    try:
                        if length < self._size(real, fd):
                            self._load_page(fd, real, length // PAGE)
                    finally:
                        os.close(fd)
                self._truncate(real, length)
                return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            if not self.fsync_open.is_set():
                with self.mutex:
                    self.fsyncs_waiting += 1
                self.fsync_open.wait()
                with self.mutex:
                    self.fsyncs_waiting -= 1
            with self.mutex:
                self._alive()
                if self.failing:  # the disk refuses: nothing is persisted, the pages stay pending
                    raise mfusepy.FuseOSError(errno.EIO)
                h = self.handles[fh]
                self._persist(h.fd, h.path)
                if self.fail_after_fsync:  # the disk dies right after this fsync
                    self.fail_after_fsync = False
                    self.failing = True
                return 0

    return LazyFS


def main() -> None:
    backing, mount = sys.argv[1], sys.argv[2]
    import mfusepy

    fs = _make_ops()(backing)

    def control() -> None:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "cut":
                n = fs.cut()
                print(f"cut dropped_pages={n}", flush=True)
            elif cmd == "release":
                fs.thawed.set()
                print("released", flush=True)
            elif cmd == "hold":
                fs.fsync_open.clear()
                print("holding", flush=True)
            elif cmd == "unhold":
                fs.fsync_open.set()
                print("unheld", flush=True)
            elif cmd == "fail":
                fs.failing = True
                print("failing", flush=True)
            elif cmd == "fail-after-fsync":
                fs.fail_after_fsync = True
                print("failing after the next fsync", flush=True)
            elif cmd == "die-after-fsync":
                fs.fail_after_fsync = fs.failing_all = True
                print("dying after the next fsync", flush=True)
            elif cmd == "unfail":
                fs.failing = fs.failing_all = fs.fail_after_fsync = False
                print("unfailed", flush=True)
            elif cmd == "waiting":
                print(fs.fsyncs_waiting, flush=True)
            elif cmd == "stats":
                print(fs.stats(), flush=True)

    def ready() -> None:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mount) and time.monotonic() < deadline:
            time.sleep(0.01)
        print("ready" if os.path.ismount(mount) else "not mounted", flush=True)

    threading.Thread(target=control, daemon=True).start()
    threading.Thread(target=ready, daemon=True).start()
    mfusepy.FUSE(fs, mount, foreground=True, fsname="weir-lazyfs")


def _is_mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point (from the mount table: a dead FUSE mount cannot be stat'd)."""
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


class LazyMount:
    """The test side: a LazyFS process mounted at ``mount`` over ``backing``.

    `cut()` is the power cut (unsynced writes dropped, I/O blocks from then on);
    `release()` fails the blocked I/O; `remount()` unmounts and mounts a fresh
    process on what was synced.
    """

    def __init__(self, backing: Path, mount: Path, outside: Path) -> None:
        self.backing = backing
        self.mount = mount
        self.outside = outside  # a real directory for LMDB's lock file
        self.proc: subprocess.Popen[str] | None = None
        self.dropped_pages = 0
        self.log = outside / "lazyfs.log"  # libfuse's own messages

    @staticmethod
    def available() -> str | None:
        """None when FUSE mounts work here, else why not."""
        if not os.path.exists("/dev/fuse"):
            return "no /dev/fuse"
        if shutil.which("fusermount3") is None:
            return "fusermount3 not installed (Debian package fuse3)"
        try:
            import mfusepy  # noqa: F401
        except (ImportError, OSError, AttributeError) as exc:
            return f"mfusepy / libfuse3 not usable: {exc}"
        return None

    def start(self) -> LazyMount:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        self.outside.mkdir(parents=True, exist_ok=True)
        kv = self.backing / "kv"
        kv.mkdir(exist_ok=True)
        lock = kv / "lock.mdb"
        if not lock.is_symlink():
            lock.symlink_to(self.outside / "lock.mdb")
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.reliability.lazyfs",
                    str(self.backing),
                    str(self.mount),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=Path(__file__).resolve().parents[2],
                start_new_session=True,  # signals meant for the test or the server miss it
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.stop()
            raise RuntimeError(
                f"lazyfs did not mount {self.mount}: {line!r}\n{self.log.read_text()[-2000:]}"
            )
        return self

    def _command(self, cmd: str) -> str:
        assert self.proc is not None and self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def cut(self) -> int:
        """Power loss: returns how many unsynced pages were dropped."""
        reply = self._command("cut")
        n = int(reply.rsplit("=", 1)[-1])
        self.dropped_pages += n
        return n

    def release(self) -> None:
        """After a cut: blocked operations fail with EIO (their callers must be dead by now)."""
        self._command("release")

    def hold_fsync(self) -> None:
        """From now on every fsync waits (a slow disk) until `unhold_fsync`."""
        self._command("hold")

    def unhold_fsync(self) -> None:
        self._command("unhold")

    def fail_fsync(self) -> None:
        """From now on every fsync / fdatasync and every O_DSYNC write fails with EIO (a
        dying disk); nothing more is persisted until `unfail_fsync`."""
        self._command("fail")

    def fail_after_next_fsync(self) -> None:
        """The next fsync succeeds, then the disk fails as `fail_fsync` says: it dies
        between a commit's two durable writes (LMDB's data pages, then its meta page)."""
        self._command("fail-after-fsync")

    def die_after_next_fsync(self) -> None:
        """As `fail_after_next_fsync`, and every later write that is not durable fails
        too, without reaching the cache (until `unfail_fsync`): a disk behind a dead
        link, say."""
        self._command("die-after-fsync")

    def unfail_fsync(self) -> None:
        self._command("unfail")

    def fsyncs_waiting(self) -> int:
        return int(self._command("waiting"))

    def stats(self) -> str:
        return self._command("stats")

    def stop(self) -> None:
        """Unmount (the process exits when its mount goes); nothing may have files open."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.unhold_fsync()
            self.release()
        proc, self.proc = self.proc, None
        for args in (["-u"], ["-u", "-z"]):
            if not _is_mounted(self.mount):
                break
            subprocess.run(
                ["fusermount3", *args, str(self.mount)], capture_output=True, check=False
            )
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        if proc.stdout is not None:
            proc.stdout.close()

    def remount(self) -> LazyMount:
        self.stop()
        return self.start()


if __name__ == "__main__":
    main()
