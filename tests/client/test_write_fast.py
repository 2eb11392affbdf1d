"""The compiled write() of the caller-driven TCP writer (`weir.client._write_fast`) against
its reference, the Python write (`DirectWriterCore._write_py`): for random sequences of
writes (bytes, str, bytearray data, keys, headers, created_at; the common call mixed with
the rest) both buffer the same messages, encode the same batches byte for byte and store
the same messages; hostile calls (wrong types, oversized, unknown or extra arguments)
raise the same typed errors with the same text and leave the writer usable; the C path
holds no references it should not (the written bytes' refcount and traced memory return
to where they were); a write while another thread holds the writer's lock waits for
it; a build of another `_write_fast.c` is not run."""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import weir
from tests.client.test_tcp_transport import client_of, tcp_env
from tests.conftest import ServerProcess
from weir.client import write_compiled
from weir.client.direct_writer import DirectWriterCore
from weir.client.write_buffer import Buffer
from weir.errors import WeirError

pytestmark = pytest.mark.skipif(
    not write_compiled.COMPILED, reason="weir.client._write_fast is not built"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("write-fast"), env=tcp_env())
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[weir.Client]:
    with client_of(server, "tcp") as c:
        c.create_topic("wfc", partitions=1)
        c.create_topic("wfp", partitions=1)
        yield c


def pair(client: weir.Client, producer: str) -> tuple[weir.Writer, weir.Writer]:
    """The same producer on two topics (a producer writes one partition of a topic): "wfc"
    written through C, "wfp" through Python."""
    wc = client.writer("wfc", partition=0, producer_id=producer)
    wp = client.writer("wfp", partition=0, producer_id=producer)
    for w in (wc, wp):
        w.wait_init()
        assert isinstance(w._core, DirectWriterCore)
    wp.write = wp._core._write_py  # type: ignore[method-assign]
    assert type(wc._core).write is write_compiled.FastWrite.write  # type: ignore[union-attr]
    return wc, wp


@contextlib.contextmanager
def no_io(*cores: DirectWriterCore) -> Iterator[None]:
    """Nothing leaves the buffers: the writes' steps and the idle tick are held off."""
    with contextlib.ExitStack() as stack:
        for core in cores:
            stack.enter_context(core._io)  # the idle tick only tries it; ours re-enter
            core._pump = lambda force: None  # type: ignore[method-assign]
            core._wrote_threadsafe = lambda wake: None  # type: ignore[method-assign]
        try:
            yield
        finally:
            for core in cores:
                del core._pump, core._wrote_threadsafe


def columns(b: Buffer) -> tuple[Any, ...]:
    return (list(b.data), list(b.created), list(b.seqs), dict(b.keys), dict(b.headers))


def encoded(core: DirectWriterCore) -> list[bytes]:
    """The batches the next request would carry, without taking them from the writer."""
    saved = (core._buf, core._buf_bytes, core._next_seq)
    core._buf = Buffer(*columns(saved[0]))
    try:
        return [s.data for s in core._take()]
    finally:
        core._buf, core._buf_bytes, core._next_seq = saved


def stored(client: weir.Client, topic: str, start: int) -> list[tuple[Any, ...]]:
    end = client.describe_topic(topic).partition_info[0].end_offset
    return [
        (m.data, m.key, dict(m.headers), m.seq_no)
        for chunk in client.read_range(topic, 0, start, end)
        for m in chunk.messages()
    ]


def end_offsets(client: weir.Client) -> list[int]:
    return [client.describe_topic(t).partition_info[0].end_offset for t in ("wfc", "wfp")]


_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20)
_data = st.one_of(st.binary(max_size=300), _text, st.binary(max_size=50).map(bytearray))
_call = st.tuples(
    _data,
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.one_of(st.none(), st.binary(max_size=10), _text),
            "headers": st.dictionaries(_text, _text, max_size=2),
            "created_at": st.integers(0, 2**41),
        },
    ),
)
# mostly the common call (plain bytes, nothing else): the one the C code takes
_calls = st.lists(st.one_of(st.binary(max_size=200).map(lambda d: (d, {})), _call), max_size=40)
_producers = iter(range(10**9))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(calls=_calls)
def test_c_and_python_writes_buffer_encode_and_store_the_same(
    client: weir.Client, calls: list[tuple[Any, dict[str, Any]]]
) -> None:
    start = end_offsets(client)
    wc, wp = pair(client, f"prop-{next(_producers)}")
    try:
        wc.write(b"first")  # the first write sets the seq_no mode (the general way)
        wp.write(b"first")
        wc.flush()
        wp.flush()
        c, p = wc._core, wp._core
        with no_io(c, p):
            for data, kw in calls:
                wc.write(data, **kw)
                wp.write(data, **kw)
            # the clock is the one thing that may differ: C's created times where Python's
            for i, ms in enumerate(c._buf.created):
                if i not in {j for j, (_, kw) in enumerate(calls) if "created_at" in kw}:
                    assert abs(p._buf.created[i] - ms) < 60_000
                    p._buf.created[i] = ms
            assert columns(c._buf) == columns(p._buf)
            counters = ("_buf_bytes", "_unacked", "_unacked_bytes", "_written", "_next_seq")
            assert [getattr(c, n) for n in counters] == [getattr(p, n) for n in counters]
            assert encoded(c) == encoded(p)
        wc.flush()
        wp.flush()
    finally:
        wc.close()
        wp.close()
    assert stored(client, "wfc", start[0]) == stored(client, "wfp", start[1])


def failure(write: Any, *args: Any, **kw: Any) -> tuple[type[BaseException], str]:
    with pytest.raises((WeirError, TypeError)) as info:
        write(*args, **kw)
    return type(info.value), str(info.value)


def test_hostile_calls_raise_the_same_typed_errors(client: weir.Client) -> None:
    wc, wp = pair(client, "hostile")
    try:
        wc.write(b"ok")
        wp.write(b"ok")
        limit = wc._core.limit.bytes
        bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
            ((1,), {}),
            ((None,), {}),
            (([b"x"],), {}),
            ((object(),), {}),
            ((b"x" * (limit + 1),), {}),
            (("é" * limit,), {}),
            ((b"x",), {"key": 5}),
            ((b"x" * limit,), {"key": b"k"}),
            ((b"x",), {"headers": "h"}),
            ((b"x",), {"seq_no": -1}),
            ((b"x",), {"created_at": "now"}),
            ((b"x",), {"nope": 1}),
            ((b"x", b"y"), {}),
            ((), {}),
        ]
        for args, kw in bad:
            got = failure(wc.write, *args, **kw)
            assert got == failure(wp.write, *args, **kw), (args, kw)
            assert got[0] is TypeError or issubclass(got[0], WeirError)
        for w in (wc, wp):
            w.write(b"still")
            w.flush()
        assert wc._core._written == wp._core._written == 2
    finally:
        wc.close()
        wp.close()


def test_the_c_write_keeps_no_references(client: weir.Client) -> None:
    payload = bytes(range(100))  # one object, so its refcount shows every reference held
    with client.writer("wfc", partition=0, producer_id="refs") as w:
        w.write(b"warm")
        w.flush()
        base = sys.getrefcount(payload)
        for _ in range(5000):
            w.write(payload)
        assert sys.getrefcount(payload) > base  # buffered or in flight: held
        w.flush()
        gc.collect()
        assert sys.getrefcount(payload) == base

        def traced() -> int:
            # not while the writer's idle tick (the loop thread, every 1 ms after the
            # last write) is in its recv with a 256 KiB buffer: it tries this lock only
            with w._core._io:
                return tracemalloc.get_traced_memory()[0]

        tracemalloc.start()
        try:
            for _ in range(3):  # warm the buffers' sizes up
                for _ in range(5000):
                    w.write(payload)
                w.flush()
            gc.collect()
            before = traced()
            for _ in range(5):
                for _ in range(5000):
                    w.write(payload)
                w.flush()
            gc.collect()
            grown = traced() - before
        finally:
            tracemalloc.stop()
        # 25,000 writes; a leaked int or bytes reference per write would be >= 700 KB
        assert grown < 200_000


def test_the_python_write_is_used_when_asked_or_not_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert DirectWriterCore.write is not DirectWriterCore._write_py
    monkeypatch.setenv("WEIR_PURE_PYTHON_WRITE", "1")
    assert write_compiled.load() is None
    monkeypatch.setenv("WEIR_PURE_PYTHON_WRITE", "0")
    assert write_compiled.load() is write_compiled.FastWrite
    monkeypatch.setitem(sys.modules, "weir.client._write_fast", None)  # not built
    assert write_compiled.load() is None


def test_a_build_of_another_source_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `_write_fast.c` edited or pulled since the last install: the Python write, and a
    warning that says to rebuild, not the old C rules."""
    other = tmp_path / "_write_fast.c"
    other.write_text(write_compiled.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(write_compiled, "SOURCE", other)
    with pytest.warns(RuntimeWarning, match="make install"):
        assert write_compiled.load() is None
    monkeypatch.setattr(write_compiled, "SOURCE", write_compiled.SOURCE.with_name("absent.c"))
    assert write_compiled.load() is write_compiled.FastWrite


def test_a_write_while_another_thread_holds_the_lock_waits_for_it(client: weir.Client) -> None:
    """The C write does not take the writer's lock: it must see it held (by a thread in the
    middle of an update of the buffer) and wait for it the Python way, not append."""
    with client.writer("wfc", partition=0, producer_id="locked") as w:
        w.write(b"first")
        w.flush()
        core = w._core
        written = core._written
        worker = threading.Thread(target=w.write, args=(b"second",))
        with core._lock:
            worker.start()
            deadline = time.monotonic() + 20
            # the worker is parked in the Python write, on the lock
            while not any(
                f.f_code.co_name == "_write_py"
                for f in _frames(sys._current_frames().get(worker.ident or 0))
            ):
                assert core._written == written, "the write appended without the lock"
                assert time.monotonic() < deadline and worker.is_alive(), "write did not wait"
                time.sleep(0.001)
            assert core._written == written and core._buf.data == []
        worker.join(20)
        assert not worker.is_alive()
        assert core._written == written + 1
        w.flush()


def _frames(frame: Any) -> Iterator[Any]:
    while frame is not None:
        yield frame
        frame = frame.f_back
