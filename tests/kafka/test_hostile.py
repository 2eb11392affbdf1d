"""Bad input to the Kafka listener gets a Kafka error code or a closed connection, never a
crash and never a stored change: damaged produce requests and record batches (from valid
ones, see tests/kafka_fuzz.py), unsupported API versions, unknown topics with auto-creation
off, oversized records. Also the atheris harness of the decoder and the C record parser."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from hypothesis import HealthCheck, given, settings

import weir
from tests.conftest import ServerProcess
from tests.kafka_fuzz import Mutation, mutated, sample_batches
from tests.reliability.atheris_run import fuzz_for
from weir.protocols.kafka import messages as m
from weir.protocols.kafka.codec import decode_request, decode_response_frame, encode_request_frame
from weir.protocols.kafka.errors import ErrorCode
from weir.protocols.kafka.records import RecordsError, parse_batches


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"WEIR_TOPICS_AUTO_CREATE": "false", "WEIR_LIMITS_MAX_MESSAGE_BYTES": "2KiB"}
    s = ServerProcess(tmp_path_factory.mktemp("kafka-hostile"), env=env)
    s.start()
    with weir.Client(s.endpoint) as c:
        c.create_topic("hostile", partitions=1)
        c.create_topic("bystander", partitions=1)
        with c.writer("bystander", producer_id="b") as w:
            w.write(b"untouched")
    yield s
    s.stop()


def _end(srv: ServerProcess, topic: str) -> int:
    with weir.Client(srv.endpoint) as c:
        return c.describe_topic(topic).partition_info[0].end_offset


def _unanswered(frame: bytes) -> bool:
    """Whether ``frame`` (without size) is a produce with acks=0: Kafka's protocol sends
    no answer to one, and a mutation of acks can make one."""
    try:
        _, api, body = decode_request(m.BY_KEY, frame)
    except Exception:
        return False
    return api.key == m.PRODUCE.key and body.get("acks") == 0


def _exchange(srv: ServerProcess, frame: bytes) -> bytes | None:
    """Send one frame; the response frame (without size), or None if the server closed
    (or at once for an acks=0 produce: the server answers nothing to one)."""
    with socket.create_connection(("127.0.0.1", srv.kafka_port), timeout=10) as s:
        s.sendall(frame)
        if _unanswered(frame[4:]):
            return None
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        (size,) = struct.unpack(">i", head)
        body = b""
        while len(body) < size:
            chunk = s.recv(size - len(body))
            if not chunk:
                return None
            body += chunk
        return body


def _produce_frame(records: bytes, topic: str = "hostile", version: int = 9) -> bytes:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    return encode_request_frame(m.PRODUCE, version, 11, body)


def _produce_error(reply: bytes, version: int = 9) -> tuple[int, int]:
    _, body = decode_response_frame(m.PRODUCE, version, reply)
    p = body["responses"][0]["partition_responses"][0]
    return p["error_code"], p["base_offset"]


def _alive(srv: ServerProcess) -> None:
    assert srv.proc is not None and srv.proc.poll() is None, "the server died"


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mut=mutated(sample_batches(), crc=True))
def test_damaged_record_batches_are_refused_or_stored_exactly(
    srv: ServerProcess, mut: Mutation
) -> None:
    before = _end(srv, "hostile")
    try:
        local: int | RecordsError = sum(b.count for b in parse_batches(mut.damaged))
    except RecordsError as exc:
        local = exc
    reply = _exchange(srv, _produce_frame(mut.damaged))
    _alive(srv)
    after = _end(srv, "hostile")
    if isinstance(local, RecordsError):
        assert reply is not None
        code, _ = _produce_error(reply)
        assert code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), (mut, code)
        assert after == before, "a refused batch changed the topic"
    else:
        assert reply is not None
        code, base = _produce_error(reply)
        if code == ErrorCode.NONE and after == before:
            assert 0 <= base < before  # a resend of an earlier batch: answered with its offset
        elif code == ErrorCode.NONE:
            assert after == before + local and base == before
        else:  # a valid batch the front refuses (a sequence, a size): nothing stored
            assert after == before, (mut, code)
    assert _end(srv, "bystander") == 1


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mut=mutated([_produce_frame(sample_batches()[0])[4:]]))
def test_damaged_request_frames_get_an_answer_or_a_closed_connection(
    srv: ServerProcess, mut: Mutation
) -> None:
    before = _end(srv, "hostile")
    frame = struct.pack(">i", len(mut.damaged)) + mut.damaged
    reply = _exchange(srv, frame)
    _alive(srv)
    if _end(srv, "hostile") != before and not _unanswered(mut.damaged):
        # stored: it must have been a produce the server answered with success
        assert reply is not None
        code, base = _produce_error(reply)
        assert code == ErrorCode.NONE and base == before
    assert _end(srv, "bystander") == 1


def test_unsupported_versions(srv: ServerProcess) -> None:
    frame = encode_request_frame(m.API_VERSIONS, 0, 3, {})
    v99 = frame[:6] + struct.pack(">h", 99) + frame[8:]
    reply = _exchange(srv, v99)
    assert reply is not None
    _, body = decode_response_frame(m.API_VERSIONS, 0, reply)
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {k["api_key"] for k in body["api_keys"]} == {a.key for a in m.ALL}
    produce = _produce_frame(sample_batches()[0])
    assert _exchange(srv, produce[:6] + struct.pack(">h", 99) + produce[8:]) is None  # closed
    assert _exchange(srv, struct.pack(">i", -5)) is None  # a negative size
    _alive(srv)


def test_unknown_topics_with_auto_creation_off(srv: ServerProcess) -> None:
    reply = _exchange(srv, _produce_frame(sample_batches()[0], topic="nope"))
    assert reply is not None
    assert _produce_error(reply)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    errors: list = []
    p = Producer({"bootstrap.servers": srv.kafka, "message.timeout.ms": 3000})
    p.produce("nope", b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0].code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._MSG_TIMED_OUT,
    )
    with weir.Client(srv.endpoint) as c:
        assert "nope" not in [t.name for t in c.list_topics()]


def test_oversized_records_are_message_too_large(srv: ServerProcess) -> None:
    before = _end(srv, "hostile")
    errors: list = []
    p = Producer({"bootstrap.servers": srv.kafka, "message.max.bytes": 100_000})
    p.produce("hostile", b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _end(srv, "hostile") == before


def test_atheris_fuzzes_the_kafka_decoder_and_record_parser(tmp_path: Path) -> None:
    fuzz_for("fuzz_kafka.py", 10, tmp_path)
