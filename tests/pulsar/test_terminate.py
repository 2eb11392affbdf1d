"""Topic termination, the Pulsar way: the admin REST's terminate answers the last message
id; from then on producers are refused (a Pulsar producer with TopicTerminated, the native
SDK's with TopicTerminatedError), also after a restart, and what was stored is still read
to its end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

import weir
from tests.conftest import ServerProcess
from tests.pulsar.conftest import make_client
from tests.pulsar.test_admin_rest import call
from weir.errors import TopicTerminatedError


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(Path(tmp_path_factory.mktemp("pulsar-terminate")))
    srv.start()
    yield srv
    srv.stop()


def test_a_terminated_topic_refuses_producers_even_after_a_restart(server: ServerProcess) -> None:
    topic = "terminated"
    path = f"/persistent/public/default/{topic}"
    client = make_client(server.pulsar_url)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"%d" % i) for i in range(3)]
    status, last = call(server.http_url, "POST", path + "/terminate")
    assert status == 200
    assert (last["entryId"], last["partitionIndex"]) == (ids[-1].entry_id(), -1)
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"too late")
    with (
        weir.Client(server.endpoint) as native,
        pytest.raises(TopicTerminatedError),
        native.writer(f"public/default/{topic}", producer_id="nat") as w,
    ):
        w.write(b"nor this")
    client.close()

    server.stop()
    server.start()
    client = make_client(server.pulsar_url)
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)  # the flag is stored
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert [consumer.receive(5000).data() for _ in range(3)] == [b"0", b"1", b"2"]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(3)] == [b"0", b"1", b"2"]
    assert not reader.has_message_available()  # its end, for good
    client.close()
    status, again = call(server.http_url, "POST", path + "/terminate")
    assert (status, again) == (200, last)  # terminating again changes nothing
