"""JetStream (issue #20) against a real `nats-server -js` of our own: message ids drop a
second copy of an upstream message whoever publishes it, and a durable consumer killed
(kill -9 of its process) and restarted gets every message once, without keeping a position.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest

from dataplane.ring import Gap, RingMessage
from gateway.client.nats import NatsSource
from gateway.dialects.identity import binance_identity
from gateway.hub import Hub
from gateway.hub.nats import JetStreamConfig, NatsConfig, NatsSink
from tests.integration.nats_helpers import needs_nats
from tests.integration.test_nats_sink import wait_until
from wsgw_bench.servers import NatsServer

pytestmark = needs_nats
ROOT = Path(__file__).resolve().parents[2]
STREAM = "MD"
SESSION = 1


def trade(trade_id: int) -> bytes:
    """A Binance combined-stream trade: its exchange id is `t`."""
    return (
        b'{"stream":"btcusdt@trade","data":{"e":"trade","s":"BTCUSDT","t":%d,"p":"1"}}' % trade_id
    )


def trade_id(payload: bytes) -> int:
    return int(payload.split(b'"t":', 1)[1].split(b",", 1)[0])


def trade_ids(events: list[Any]) -> list[int]:
    """The trade ids of messages; anything else here is a failure."""
    assert all(isinstance(e, RingMessage) for e in events), events
    return [trade_id(bytes(e.payload)) for e in events]


@pytest.fixture
def server() -> Iterator[NatsServer]:
    with NatsServer(jetstream=True) as nats:
        yield nats


class Gateway:
    """A hub and its NATS sink with JetStream on, as one gateway run publishes."""

    def __init__(
        self,
        url: str,
        *,
        identity: bool = True,
        storage: Literal["file", "memory"] = "memory",
        **limits: Any,
    ) -> None:
        js = JetStreamConfig(stream=STREAM, storage=storage, **limits)
        config = NatsConfig(
            servers=[url],
            jetstream=js,
            identity=(lambda sid: binance_identity) if identity else None,
        )
        self.sink = NatsSink(config).start(10)
        wait_until(lambda: self.sink.stats.jetstream_ready)
        self.hub = Hub(nats=self.sink)

    def publish(self, payloads: list[bytes], wait: bool = True) -> None:
        """Publish; wait: until the sink has published them all."""
        before = self.sink.stats.published
        for at in range(0, len(payloads), 100):
            batch = payloads[at : at + 100]
            self.hub.publish_batch([(SESSION, "btcusdt@trade", p, 0, None) for p in batch])
        if wait:
            self.wait_published(before + len(payloads))

    def wait_published(self, published: int) -> None:
        sink = self.sink
        wait_until(
            lambda: sink.stats.published >= published and sink.pending == 0 and not sink.unacked,
            60,
        )

    def close(self) -> None:
        self.hub.close()


def stored(url: str) -> list[bytes]:
    """Every message of the stream, in stream order."""

    async def read() -> list[bytes]:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        info = await js.stream_info(STREAM)
        got: list[bytes] = []
        if not info.state.messages:
            await nc.close()
            return got
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            got.append((await js.get_msg(STREAM, seq)).data or b"")
        await nc.close()
        return got

    return asyncio.run(read())


def sink_into_stream(server: NatsServer, js: JetStreamConfig) -> tuple[NatsSink, Hub]:
    """A sink into the JetStream stream (binance ids; quick reconnects; nats-py's reconnect
    buffer 16 KiB), ready, and a hub over it."""
    config = NatsConfig(
        servers=[server.url],
        jetstream=js,
        identity=lambda sid: binance_identity,
        reconnect_wait_s=0.2,
        connect_timeout_s=0.5,
        pending_bytes=16 << 10,
    )
    sink = NatsSink(config).start(10)
    hub = Hub(nats=sink)
    try:
        wait_until(lambda: sink.stats.jetstream_ready)
    except BaseException:
        hub.close()
        raise
    return sink, hub


def trades_into(hub: Hub) -> Callable[[range], None]:
    """publish(ids): the trades with those ids into the hub, 100 a batch."""

    def publish(ids: range) -> None:
        for at in range(ids.start, ids.stop, 100):
            batch = [trade(i) for i in range(at, min(at + 100, ids.stop))]
            hub.publish_batch([(SESSION, "btcusdt@trade", p, 0, None) for p in batch])

    return publish


def read_stream_until_trade(url: str, last: int) -> list[Any]:
    """The stream's events from its first message until the trade `last` came."""
    events: list[Any] = []
    reader = NatsSource(url, session=SESSION, jetstream=STREAM, start_seq=1)
    try:

        def collected() -> bool:
            events.extend(reader.read(1000, 0.2))
            return any(
                isinstance(e, RingMessage)
                and not e.topic.endswith("$gap")
                and trade_id(bytes(e.payload)) == last
                for e in events
            )

        wait_until(collected, 20)
    finally:
        reader.close()
    return events


def assert_missing_told(events: list[Any], last: int, reason: str) -> None:
    """Trades 1..last are missing (else the scenario tested nothing), and `$gap` records
    of `reason` count at least as many as are missing, for this session and run."""
    gaps = [
        orjson.loads(bytes(e.payload))
        for e in events
        if isinstance(e, RingMessage) and e.topic.endswith("$gap")
    ]
    got = {
        trade_id(bytes(e.payload))
        for e in events
        if isinstance(e, RingMessage) and not e.topic.endswith("$gap")
    }
    missing = set(range(1, last + 1)) - got
    assert missing  # the scenario lost messages (else it tests nothing)
    told = [g for g in gaps if g["reason"] == reason]
    assert told, gaps
    assert sum(g["lost"] for g in told) >= len(missing)
    assert all(g["session"] == SESSION and g["epoch"] for g in told)


def test_a_message_published_again_by_another_run_is_stored_once(server: NatsServer) -> None:
    first = Gateway(server.url, duplicate_window_s=30)
    try:
        first.publish([trade(i) for i in range(1, 301)])
    finally:
        first.close()  # a gateway restarted mid-stream: its venue replays from 201
    second = Gateway(server.url, duplicate_window_s=30)
    try:
        second.publish([trade(i) for i in range(201, 501)])
    finally:
        second.close()
    assert [trade_id(p) for p in stored(server.url)] == list(range(1, 501))


def test_without_exchange_ids_each_run_s_messages_are_kept(server: NatsServer) -> None:
    """Ids from the run and ring sequence: two runs' equal frames are two messages."""
    for _ in range(2):
        run = Gateway(server.url, identity=False)
        try:
            run.publish([b'{"x":1}'] * 50)
        finally:
            run.close()
    assert len(stored(server.url)) == 100


def test_msg_ids_off_stores_every_copy_and_the_window_is_the_stream_s(server: NatsServer) -> None:
    for _ in range(2):
        run = Gateway(server.url, msg_ids=False, duplicate_window_s=7.5)
        try:
            run.publish([trade(i) for i in range(1, 11)])
        finally:
            run.close()
    assert len(stored(server.url)) == 20

    async def window() -> float:
        import nats

        nc = await nats.connect(server.url)
        info = await nc.jetstream().stream_info(STREAM)
        await nc.close()
        return float(info.config.duplicate_window or 0)

    assert asyncio.run(window()) == 7.5


# ---- a durable consumer in a process of its own ----------------------------------------------
CONSUMER = """
import os, sys
from dataplane.ring import Gap, RingMessage
from gateway.client import Client, Restart

url, durable, ack, stream, session = sys.argv[1:6]
every = session == "all"  # then each line is <session>:<trade id>
client = Client.connect(
    url, session=None if every else int(session), jetstream=stream, durable=durable, follow=True
)
client.source.ack = ack
os.write(1, b"ready\\n")
while True:
    lines = []
    for event in client.read(timeout=0.5):
        if isinstance(event, Gap):
            lines.append("gap")
        elif isinstance(event, Restart):
            lines.append("restart")
        elif isinstance(event, RingMessage) and event.topic.endswith("$gap"):
            # (on stderr, which a failing test shows: whether a loss was told, and why)
            os.write(2, b"consumer got a $gap record: " + bytes(event.payload) + b"\\n")
        elif isinstance(event, RingMessage):
            t = bytes(event.payload).split(b'"t":')[1].split(b",")[0].decode()
            lines.append(f"{event.session_id}:{t}" if every else t)
    if lines:
        os.write(1, ("\\n".join(lines) + "\\n").encode())  # one write: all or nothing
"""


class Consumer:
    """A consumer process reading the durable; what it printed is kept across its lives."""

    def __init__(
        self, url: str, durable: str, ack: str = "read", stream: str = STREAM, session: str = "1"
    ) -> None:
        self.args = [sys.executable, "-c", CONSUMER, url, durable, ack, stream, session]
        self.lives: list[list[str]] = []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        proc = subprocess.Popen(self.args, cwd=ROOT, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n", "the consumer did not start"
        lines: list[str] = []
        self.lives.append(lines)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.decode().strip())

        threading.Thread(target=pump, daemon=True).start()
        self.proc = proc

    def wait_for(self, count: int) -> None:
        wait_until(lambda: len(self.got) >= count)

    @property
    def got(self) -> list[str]:
        return [line for life in self.lives for line in life]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    made: list[Consumer] = []
    yield made
    for consumer in made:
        consumer.kill()


def test_a_killed_durable_consumer_restarted_gets_every_message_once(
    server: NatsServer, consumers: list[Consumer]
) -> None:
    gateway = Gateway(server.url)
    consumer = Consumer(server.url, "kill9")
    consumers.append(consumer)
    try:
        consumer.start()
        sent: list[str] = []
        for burst in range(4):
            ids = list(range(burst * 500 + 1, burst * 500 + 501))
            gateway.publish([trade(i) for i in ids])
            sent += [str(i) for i in ids]
            if burst % 2 == 0:  # read what came, then die (kill -9); the next burst comes
                consumer.wait_for(len(sent))
                consumer.kill()
            else:  # ... while it is away; back, it resumes after its last ack by itself
                consumer.start()
                consumer.wait_for(len(sent))
    finally:
        gateway.close()
    assert consumer.got == sent  # every one, once, in order, across three lives
    assert len(consumer.lives) == 3


def test_ack_next_a_kill_mid_flow_loses_nothing(
    server: NatsServer, consumers: list[Consumer]
) -> None:
    """ack="next": what the consumer held when it died comes again; nothing is lost."""
    gateway = Gateway(server.url)
    consumer = Consumer(server.url, "next", ack="next")
    consumers.append(consumer)
    try:
        consumer.start()
        ids = list(range(1, 5001))
        flow = threading.Thread(
            target=lambda: gateway.publish([trade(i) for i in ids], wait=False), daemon=True
        )
        flow.start()
        wait_until(lambda: len(consumer.got) >= 500)
        consumer.kill()  # mid-flow
        before = list(consumer.got)
        flow.join(60)
        gateway.wait_published(len(ids))
        consumer.start()
        wait_until(lambda: set(consumer.got) >= {str(i) for i in ids}, timeout=30)
    finally:
        gateway.close()
    after = consumer.lives[-1]
    assert [int(x) for x in before] == ids[: len(before)]  # in order up to the kill
    assert sorted({int(x) for x in consumer.got}) == ids
    again = set(before) & set(after)
    assert len(again) <= 1024  # at most the last read's worth (one batch) came twice


def test_messages_the_limits_removed_before_the_durable_read_them_are_a_gap(
    server: NatsServer,
) -> None:
    gateway = Gateway(server.url, max_msgs=100)
    try:
        source = NatsSource(server.url, session=SESSION, jetstream=STREAM, durable="slow")
        gateway.publish([trade(i) for i in range(1, 51)])
        wait_until(lambda: source.wait(0.1) and len(source._events) == 50)
        first = source.read(10)
        source.close()
        gateway.publish([trade(i) for i in range(51, 301)])  # the stream keeps 201..300
        source = NatsSource(server.url, session=SESSION, jetstream=STREAM, durable="slow")
        events: list[Any] = []

        def collected() -> bool:
            events.extend(source.read(1000, 0.2))
            return len(events) >= 101

        wait_until(collected)
        source.close()
    finally:
        gateway.close()
    assert trade_ids(first) == list(range(1, 11))
    gap = events[0]
    assert isinstance(gap, Gap)
    assert (gap.first_seq, gap.lost) == (11, 190)  # stream sequences 11..200 went unread
    rest = events[1:]
    assert all(isinstance(e, RingMessage) for e in rest)
    assert trade_ids(rest) == list(range(201, 301))


def test_a_durable_restarted_knows_the_run_it_last_read(
    server: NatsServer, consumers: list[Consumer]
) -> None:
    """The durable remembers the gateway run of the last gap record its reader acked: a
    reader killed and restarted while the gateway restarted gets a Restart first."""
    consumer = Consumer(server.url, "runs")
    consumers.append(consumer)
    first = Gateway(server.url)
    try:
        consumer.start()
        first.hub.publish_gap(SESSION, None, "start")
        first.publish([trade(i) for i in range(1, 11)])
        consumer.wait_for(10)
        consumer.kill()
    finally:
        first.close()
    second = Gateway(server.url)  # another run: another epoch
    try:
        second.hub.publish_gap(SESSION, None, "start")
        second.publish([trade(i) for i in range(11, 21)])
        consumer.start()
        consumer.wait_for(21)
        consumer.kill()
        consumer.start()  # the same run again: no Restart
        second.publish([trade(i) for i in range(21, 26)])
        consumer.wait_for(26)
    finally:
        second.close()
    assert consumer.lives[0] == [str(i) for i in range(1, 11)]
    assert consumer.lives[1] == ["restart", *(str(i) for i in range(11, 21))]
    assert consumer.lives[2] == [str(i) for i in range(21, 26)]


def stream_back(url: str) -> bool:
    try:
        return len(stored(url)) >= 0
    except Exception:
        return False


def test_a_durable_goes_on_by_itself_across_a_nats_server_restart(server: NatsServer) -> None:
    """A file stream and its durable survive the server's restart; nats-py reconnects the
    reader and the sink, and the reader goes on after what it acked, nothing twice."""
    gateway = Gateway(server.url, storage="file")
    source = NatsSource(server.url, session=SESSION, jetstream=STREAM, durable="bus")
    got: list[int] = []

    def take(count: int) -> None:
        def more() -> bool:
            got.extend(trade_ids(source.read(1000, 0.2)))
            return len(got) >= count

        wait_until(more, 30)

    try:
        gateway.publish([trade(i) for i in range(1, 101)])
        take(100)
        server.stop()
        server.start()
        wait_until(lambda: gateway.sink.stats.reconnects >= 1, 30)
        wait_until(lambda: stream_back(server.url), 30)  # the reader's part, not the sink's
        gateway.publish([trade(i) for i in range(101, 201)])
        take(200)
        time.sleep(0.5)
        got.extend(trade_ids(source.read(1000, 0)))
    finally:
        source.close()
        gateway.close()
    assert got == list(range(1, 201))
    assert source.ack_failures == 0


def across_a_restart(
    server: NatsServer, gateway: Gateway, source: NatsSource, expected: int
) -> list[Any]:
    """Trades 1-100 read, the server restarted, the sink back with its stream, trades
    101-200 published: what the source read, once `expected` events came (or 15 s went by,
    plus what came in the next 0.3 s: the asserts then say what is missing)."""
    events: list[Any] = []
    gateway.publish([trade(i) for i in range(1, 101)])

    def collected(count: int) -> bool:
        events.extend(source.read(1000, 0.2))
        return len(events) >= count

    wait_until(lambda: collected(100))
    server.stop()
    server.start()
    wait_until(lambda: gateway.sink.stats.reconnects >= 1, 30)
    wait_until(lambda: stream_back(server.url), 30)
    gateway.publish([trade(i) for i in range(101, 201)])
    with contextlib.suppress(AssertionError):
        wait_until(lambda: collected(expected), 15)
    time.sleep(0.3)
    events.extend(source.read(1000, 0))
    return events


def test_a_durable_whose_stream_began_again_goes_on_behind_a_gap(server: NatsServer) -> None:
    """A memory stream and its durable are gone with the server's restart; the sink makes
    the stream again. The reader makes its durable again on the new stream and goes on
    from its first message, behind a Gap (how many went with the old stream: not known)."""
    gateway = Gateway(server.url, storage="memory")
    source = NatsSource(server.url, session=SESSION, jetstream=STREAM, durable="bus")
    try:
        events = across_a_restart(server, gateway, source, 201)
    finally:
        source.close()
        gateway.close()
    assert trade_ids(events[:100]) == list(range(1, 101))
    assert len(events) > 100, "the reader got nothing after the restart"
    gap = events[100]
    assert isinstance(gap, Gap) and (gap.lost, gap.first_seq) == (0, 0), events[100:102]
    assert trade_ids(events[101:]) == list(range(101, 201))


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_a_reader_without_a_durable_goes_on_across_a_nats_server_restart(
    server: NatsServer, storage: Literal["file", "memory"]
) -> None:
    """The reader's ephemeral consumer is gone with the server's restart: it subscribes
    again after the last message it got, nothing twice; from the first message of a stream
    that began again (memory), behind Gap(0, 0)."""
    gateway = Gateway(server.url, storage=storage)
    source = NatsSource(server.url, session=SESSION, jetstream=STREAM)
    try:
        events = across_a_restart(server, gateway, source, 200 if storage == "file" else 201)
    finally:
        source.close()
        gateway.close()
    assert trade_ids(events[:100]) == list(range(1, 101))
    assert len(events) > 100, "the reader got nothing after the restart"
    rest = events[100:]
    if storage == "memory":
        gap = rest.pop(0)
        assert isinstance(gap, Gap) and (gap.lost, gap.first_seq) == (0, 0), gap
    assert trade_ids(rest) == list(range(101, 201))


def test_a_running_durable_that_falls_behind_the_limits_gets_a_gap_where_it_lost(
    server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader holds MAX_QUEUED unread and stops fetching; the stream keeps its last 500:
    what it removed unfetched comes as a Gap while the reader runs, not at its next open."""
    import gateway.client.nats as client_nats

    monkeypatch.setattr(client_nats, "MAX_QUEUED", 100)
    gateway = Gateway(server.url, max_msgs=500)
    source = NatsSource(server.url, session=SESSION, jetstream=STREAM, durable="behind")
    events: list[Any] = []
    try:
        gateway.publish([trade(i) for i in range(1, 2001)])  # the stream keeps 1501..2000

        def collected() -> bool:
            events.extend(source.read(1000, 0.2))
            return (
                bool(events)
                and isinstance(events[-1], RingMessage)
                and (trade_id(bytes(events[-1].payload)) == 2000)
            )

        wait_until(collected, 30)
    finally:
        source.close()
        gateway.close()
    # Every stream sequence once, in order: a message (trade i is stream sequence i) or in a
    # Gap; how much it fetched before it fell behind depends on the machine's load.
    expected = 1
    for event in events:
        if isinstance(event, Gap):
            assert event.first_seq == expected
            expected += event.lost
        else:
            assert trade_ids([event]) == [expected]
            expected += 1
    assert expected == 2001
    assert any(isinstance(e, Gap) for e in events)
    assert trade_ids([e for e in events if not isinstance(e, Gap)])[-500:] == list(
        range(1501, 2001)
    )


def test_a_durable_of_one_session_between_others_sees_no_gap(server: NatsServer) -> None:
    """Stream sequences jump over the other sessions' messages: that is no loss."""
    gateway = Gateway(server.url)
    source = NatsSource(server.url, session=SESSION, jetstream=STREAM, durable="one")
    got: list[Any] = []
    try:
        for at in range(1, 1001, 100):
            gateway.hub.publish_batch(
                [
                    (sid, "btcusdt@trade", trade(i), 0, None)
                    for i in range(at, at + 100)
                    for sid in (SESSION, SESSION + 1)
                ]
            )
        gateway.wait_published(2000)

        def collected() -> bool:
            got.extend(source.read(1000, 0.2))
            return len(got) >= 1000

        wait_until(collected, 30)
        time.sleep(0.3)
        got.extend(source.read(1000, 0))
    finally:
        source.close()
        gateway.close()
    assert trade_ids(got) == list(range(1, 1001))


# ---- a reader without a durable, resuming at a stream sequence -----------------------------
def test_a_start_seq_the_limits_removed_is_a_gap(server: NatsServer) -> None:
    """Resuming at position + 1 (the module doc's way without a durable) after the stream's
    limits removed messages from there: a Gap of the stream sequences removed comes first,
    and, for a start_seq still stored, none."""
    gateway = Gateway(server.url, max_msgs=100)
    try:
        first = NatsSource(server.url, session=SESSION, jetstream=STREAM)
        gateway.publish([trade(i) for i in range(1, 51)])
        got: list[Any] = []

        def collected(source: NatsSource, into: list[Any], count: int) -> bool:
            into.extend(source.read(1000, 0.2))
            return len(into) >= count

        wait_until(lambda: collected(first, got, 50))
        first.close()
        assert first.position == 50
        gateway.publish([trade(i) for i in range(51, 301)])  # the stream keeps 201..300

        def read_from(start_seq: int, count: int) -> list[Any]:
            """A reader opened at start_seq: its events once `count` came, and 0.2 s more."""
            reader = NatsSource(server.url, session=SESSION, jetstream=STREAM, start_seq=start_seq)
            into: list[Any] = []
            try:
                wait_until(lambda: collected(reader, into, count))
                time.sleep(0.2)
                into.extend(reader.read(1000, 0))
            finally:
                reader.close()
            return into

        events = read_from(51, 100)
        stored_ones = read_from(250, 51)
    finally:
        gateway.close()
    assert trade_ids(got) == list(range(1, 51))
    gap = events[0]
    assert isinstance(gap, Gap), events[:2]
    assert (gap.first_seq, gap.lost) == (51, 150)  # stream sequences 51..200 went unread
    assert trade_ids(events[1:]) == list(range(201, 301))
    assert trade_ids(stored_ones) == list(range(250, 301))


# ---- what the sink gave up on --------------------------------------------------------------
def test_messages_the_sink_gave_up_on_are_a_gap_in_the_stream() -> None:
    """The server is away longer than retry_for_s and nats-py's reconnect buffer is full:
    the sink drops what JetStream never acknowledged. A reader of the stream learns of it
    from a `$gap` record (reason nats_sink_unacked) that counts at least what is missing."""
    server = NatsServer(jetstream=True).start()
    js = JetStreamConfig(stream=STREAM, storage="file", ack_timeout_s=0.2, retry_for_s=1.0)
    sink, hub = sink_into_stream(server, js)
    try:
        publish = trades_into(hub)
        publish(range(1, 101))
        wait_until(lambda: sink.stats.stored >= 100 and not sink.unacked)
        server.stop()
        wait_until(lambda: not sink.stats.connected)
        publish(range(101, 1101))  # beyond nats-py's buffer; unacknowledged for good
        wait_until(lambda: sink.stats.dropped_unacked >= 500, 20)
        server.start()
        wait_until(lambda: sink.stats.connected and sink.stats.reconnects >= 1, 20)
        publish(range(1101, 1201))
        wait_until(lambda: sink.stats.stored >= 200 and not sink.unacked, 20)
        events = read_stream_until_trade(server.url, 1200)
    finally:
        hub.close()
        server.cleanup()
    assert_missing_told(events, 1200, "nats_sink_unacked")


def test_messages_the_sink_dropped_while_disconnected_are_a_gap_in_the_stream() -> None:
    """ack_window=0 (core publishes into the stream): the server away, nats-py's reconnect
    buffer full, the sink drops. A reader of the stream learns of it from a `$gap` record
    (reason nats_sink_dropped) that counts at least what is missing."""
    server = NatsServer(jetstream=True).start()
    js = JetStreamConfig(stream=STREAM, storage="file", ack_window=0)
    sink, hub = sink_into_stream(server, js)
    try:
        publish = trades_into(hub)
        publish(range(1, 101))
        wait_until(lambda: sink.stats.published >= 100 and sink.pending == 0)
        wait_until(lambda: len(stored(server.url)) >= 100)
        server.stop()
        wait_until(lambda: not sink.stats.connected)
        publish(range(101, 1101))  # beyond nats-py's buffer
        wait_until(lambda: sink.pending == 0 and sink.dropped["disconnected"] > 0, 20)
        server.start()
        wait_until(lambda: sink.stats.connected and sink.stats.reconnects >= 1, 20)
        wait_until(lambda: stream_back(server.url), 20)
        publish(range(1101, 1201))
        events = read_stream_until_trade(server.url, 1200)
    finally:
        hub.close()
        server.cleanup()
    assert_missing_told(events, 1200, "nats_sink_dropped")
