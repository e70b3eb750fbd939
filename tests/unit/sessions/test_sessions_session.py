"""UpstreamSession against in-memory connections: batches, the planner's connections,
paced requests, refusals, reconnects (dropped, requested, dead), pings, keepalives,
giving up, transport choice. Real asyncio, tiny delays, no sockets."""

from __future__ import annotations

import asyncio
import socket
import sys
import types
from collections.abc import Awaitable
from functools import partial
from typing import Any, TypeVar

import pytest

from dataplane.ws.errors import ConnectionClosed
from dataplane.ws.events import Message
from gateway.dialects import GenericConfig, Limits
from gateway.sessions import (
    HeartbeatConfig,
    ReconnectPolicy,
    RecordingSink,
    SessionConfig,
    State,
    UpstreamSession,
    recv_batch,
)
from gateway.sessions.session import SINK_REFUSED
from gateway.sessions.sink import GapMark
from tests.unit.sessions.fakes import (
    EventLog,
    FakeConnection,
    FakeNetwork,
    bitstamp_responder,
    generic_responder,
    okx_responder,
    resolve_localhost,
    until,
)
from tests.utils.leg_sink import LegSink

T = TypeVar("T")
QUIET = HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=None)


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro, 10)

    return asyncio.run(main())


def config(dialect: str = "generic", **overrides: Any) -> SessionConfig:
    values: dict[str, Any] = {
        "url": "ws://feed.test:9000/ws",
        "dialect": dialect,
        "reconnect": ReconnectPolicy(initial_delay_s=0.001, max_delay_s=0.01),
        "heartbeat": QUIET,
        "ack_timeout_s": 1.0,
        "close_timeout_s": 0.5,
    }
    values.update(overrides)
    return SessionConfig(**values)


def generic_with(limits: Limits) -> dict[str, Any]:
    return {"dialect_options": {"config": GenericConfig(limits=limits)}}


def session(
    net: FakeNetwork, cfg: SessionConfig | None = None, topics: tuple[str, ...] = ("a", "b")
) -> tuple[UpstreamSession, RecordingSink, EventLog]:
    sink = RecordingSink()
    events = EventLog()
    s = UpstreamSession(
        5,
        cfg or config(),
        sink,
        on_event=events.append,
        topics=topics,
        connector=net.connect,
        resolver=resolve_localhost,
    )
    return s, sink, events


def no_session_tasks() -> bool:
    return not [t for t in asyncio.all_tasks() if t.get_name().startswith("wsgw-session")]


def test_a_burst_is_one_batch_to_the_sink() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        s, sink, events = session(net)
        s.start()
        await until(lambda: s.state is State.STREAMING)
        conn = net.last
        assert conn.subscribed == {"a", "b"}
        assert conn.options["connect_host"] == "127.0.0.1"
        assert conn.options["connect_port"] == 9000
        for i in range(1, 11):
            conn.push({"topic": "a" if i % 2 else "b", "sim_seq": i})
        await until(lambda: s.counters.messages == 10)
        assert sink.batches == 1  # one classify_batch, one publish_batch
        messages = sink.messages()
        assert [m[1] for m in messages] == ["a", "b"] * 5
        assert all(m[0] == 5 and m[3] > 0 and m[4] is None for m in messages)
        assert messages[0][2] == b'{"topic":"a","sim_seq":1}'
        assert s.counters.topic_messages == {"a": 5, "b": 5}
        await s.stop()
        assert conn.close_calls == [(1000, "stop requested")]
        assert events.states() == ["connecting", "subscribing", "streaming", "stopping", "stopped"]
        assert all(e.reason for e in events)
        assert no_session_tasks()

    run(scenario())


def test_topics_split_over_connections_at_the_cap() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        cfg = config(**generic_with(Limits(max_topics_per_connection=2)))
        s, _, events = session(net, cfg, ("t1", "t2", "t3", "t4", "t5"))
        s.start()
        await until(lambda: s.state is State.STREAMING)
        assert [c.subscribed for c in net.connections] == [{"t1", "t2"}, {"t3", "t4"}, {"t5"}]
        assert {e.connection for e in events} == {0, 1, 2}
        # The last topic of connection 2 goes: that connection closes.
        s.unsubscribe(["t5"])
        await until(lambda: bool(net.connections[2].close_calls))
        assert net.connections[2].close_calls == [(1000, "no topics left on this connection")]
        assert [c["index"] for c in s.connections()] == [0, 1]
        # One of connection 0's: an unsubscribe request, the connection stays.
        s.unsubscribe(["t1"])
        await until(lambda: net.connections[0].subscribed == {"t2"})
        # New topics fill the oldest connection with room, then a fresh one.
        s.subscribe(["t6", "t7"])
        await until(lambda: len(net.connections) == 4 and s.state is State.STREAMING)
        assert net.connections[0].subscribed == {"t2", "t6"}
        assert net.connections[3].subscribed == {"t7"}
        assert s.topics == ("t2", "t3", "t4", "t6", "t7")
        await s.stop()
        assert no_session_tasks()

    run(scenario())


def test_requests_are_paced_at_the_dialects_rate() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        limits = Limits(requests_per_second=25.0, burst=1, max_topics_per_request=1)
        s, _, events = session(net, config(**generic_with(limits)), ("a", "b", "c", "d"))
        s.start()
        await until(lambda: s.state is State.STREAMING)
        times = net.last.sent_at
        assert len(times) == 4  # one topic per request
        # 25/s with 0.8 headroom and no burst: one every 50 ms, so 150 ms from first to
        # last (less a margin for a descheduled test process on a busy machine).
        assert times[-1] - times[0] >= 0.12
        assert events[-1].reason == "subscribed 4 topics"
        await s.stop()

    run(scenario())


def test_the_streaming_reason_follows_topics_added_and_removed_while_streaming() -> None:
    """A session that streamed with no topic said "subscribed 0 topics" for ever, with
    three live: once the new requests are answered the state's reason says so again."""

    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        s, _, events = session(net, config(), ())
        s.start()
        await until(lambda: s.state is State.STREAMING)
        assert s.reason == "subscribed 0 topics"
        s.subscribe(["a", "b", "c"])
        await until(lambda: s.reason == "subscribed 3 topics")
        latest = events.of("state")[-1]
        assert latest.reason == "subscribed 3 topics" and latest.state is State.STREAMING
        assert latest.details["topics"] == 3
        s.unsubscribe(["b"])
        await until(lambda: s.reason == "subscribed 2 topics")
        states = len(events.of("state"))
        await asyncio.sleep(0.05)  # housekeeping ticks: nothing changed, nothing re-said
        assert len(events.of("state")) == states
        await s.stop()

    run(scenario())


def test_refused_topics_are_reported_and_marked_failed() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder(refuse=frozenset({"bad"})))
        s, _, events = session(
            net, config(**generic_with(Limits(max_topics_per_request=1))), ("good", "bad")
        )
        s.start()
        await until(lambda: s.state is State.STREAMING)
        assert events[-1].reason == "subscribed 1 topics, 1 refused"
        (refusal,) = events.of("subscribe_error")
        assert refusal.reason == "subscribe refused for bad: unknown topic bad"
        assert refusal.details["topics"] == ["bad"]
        assert s.failed_topics == {"bad": "unknown topic bad"}
        assert s.topics == ("good",)
        assert s.counters.subscribe_errors == 1
        # A topic the dialect cannot spell never leaves the process.
        sent = len(net.last.sent)
        assert s.subscribe(["two words"]) == []
        assert "two words" in s.failed_topics
        assert len(net.last.sent) == sent
        # Subscribing a failed topic again tries it again.
        s.subscribe(["bad"])
        await until(lambda: len(events.of("subscribe_error")) == 3)
        await s.stop()

    run(scenario())


def test_a_dropped_connection_backs_off_reports_a_gap_and_resubscribes_once() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        s, sink, events = session(net)
        s.start()
        await until(lambda: s.state is State.STREAMING)
        first = net.last
        for i in (1, 2, 3):
            first.push({"topic": "a", "sim_seq": i})
        await until(lambda: s.counters.messages == 3)
        first.drop()
        await until(lambda: len(net.connections) == 2 and s.state is State.STREAMING)
        second = net.last
        assert second.subscribed == {"a", "b"}
        assert len(second.sent) == 1  # one subscribe request with both topics
        second.push({"topic": "a", "sim_seq": 4})
        await until(lambda: s.counters.messages == 4)
        log = sink.entries()
        assert [type(e).__name__ for e in log] == ["tuple"] * 3 + ["GapMark", "tuple"]
        gap = log[3]
        assert isinstance(gap, GapMark)
        assert gap.lost is None
        assert gap.reason.startswith("reconnect: close code 1006")
        (backoff,) = [e for e in events if e.details.get("state") == "backoff"]
        assert backoff.details["close_code"] == 1006
        assert 0 <= backoff.details["delay_s"] <= 0.01
        assert (s.counters.reconnects, s.counters.gaps, s.counters.connects) == (1, 1, 2)
        await s.stop()

    run(scenario())


def test_an_exchange_reconnect_request_reconnects_at_once() -> None:
    async def scenario() -> None:
        net = FakeNetwork(bitstamp_responder)
        cfg = config("bitstamp", url="ws://feed.test/")
        s, sink, events = session(net, cfg, ("live_trades_btcusd",))
        s.start()
        await until(lambda: s.state is State.STREAMING)
        net.last.push({"event": "bts:request_reconnect", "channel": "", "data": ""})
        await until(lambda: len(net.connections) == 2 and s.state is State.STREAMING)
        reason = "exchange requested reconnect (bts:request_reconnect)"
        assert net.connections[0].close_calls == [(1000, reason)]
        assert events.states()[2:] == ["streaming", "connecting", "subscribing", "streaming"]
        assert [e.reason for e in events.of("notice")] == [reason]
        assert len(sink.gaps()) == 1
        assert net.last.subscribed == {"live_trades_btcusd"}
        await s.stop()

    run(scenario())


def test_a_silent_feed_is_dead() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        hb = HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=0.1)
        s, _, events = session(net, config(heartbeat=hb), ("a",))
        s.start()
        await until(lambda: len(net.connections) == 2)
        code, reason = net.connections[0].close_calls[0]
        assert code == 1011
        assert reason.startswith("no data for ")
        backoff = next(e for e in events if e.details.get("state") == "backoff")
        assert "no data" in backoff.reason
        await s.stop()

    run(scenario())


def test_pings_measure_rtt_and_an_unanswered_ping_kills() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        hb = HeartbeatConfig(ping_interval_s=0.02, ping_timeout_s=0.1, dead_feed_timeout_s=None)
        s, _, _ = session(net, config(heartbeat=hb))
        s.start()
        await until(lambda: s.counters.pongs >= 2)
        assert s.counters.last_rtt_s == 0.001
        net.last.auto_pong = False
        await until(lambda: len(net.connections) == 2)
        assert net.connections[0].close_calls[0][1].startswith("ping timeout")
        await s.stop()

    run(scenario())


def test_the_dialect_keepalive_goes_out_and_its_answer_counts() -> None:
    async def scenario() -> None:
        net = FakeNetwork(okx_responder)
        hb = HeartbeatConfig(ping_interval_s=None, keepalive_interval_s=0.02)
        s, _, _ = session(net, config("okx", heartbeat=hb), ("trades:BTC-USDT",))
        s.start()
        await until(lambda: s.counters.heartbeats >= 2)
        assert net.last.sent.count("ping") >= 2  # OKX: the text "ping", answered "pong"
        assert s.counters.keepalives_sent >= 2
        await s.stop()

    run(scenario())


def test_max_attempts_then_failed() -> None:
    async def scenario() -> None:
        net = FakeNetwork(refuse=100)
        policy = ReconnectPolicy(initial_delay_s=0.001, max_delay_s=0.002, max_attempts=3)
        s, _, events = session(net, config(reconnect=policy))
        s.start()
        await asyncio.wait_for(s.wait_closed(), 2)
        assert s.state is State.FAILED
        assert len(net.attempts) == 3
        assert events.states() == [
            "connecting",
            "backoff",
            "connecting",
            "backoff",
            "connecting",
            "failed",
        ]
        assert events[-1].reason == (
            "gave up after 3 failed attempts; last: connect failed: "
            "127.0.0.1:9000: Connection refused"
        )
        assert s.counters.connect_failures == 3
        assert s.counters.failures == {"refused": 3}
        await s.stop()  # a no-op on a failed session
        assert no_session_tasks()

    run(scenario())


def test_every_address_is_tried_before_backing_off() -> None:
    async def two(host: str, port: int, family: int) -> list[str]:
        return ["10.0.0.1", "10.0.0.2"]

    async def scenario() -> None:
        net = FakeNetwork(generic_responder(), refuse_hosts=frozenset({"10.0.0.1"}))
        s = UpstreamSession(1, config(), RecordingSink(), connector=net.connect, resolver=two)
        s.start()
        await until(lambda: s.state is State.STREAMING)
        assert [a["connect_host"] for a in net.attempts] == ["10.0.0.1", "10.0.0.2"]
        assert s.counters.connect_failures == 0
        await s.stop()

    run(scenario())


def test_dpdk_without_an_engine_fails_with_the_reason() -> None:
    async def scenario() -> None:
        events = EventLog()
        s = UpstreamSession(1, config(transport="dpdk"), RecordingSink(), on_event=events.append)
        s.start()
        assert s.state is State.FAILED
        assert events[-1].reason == "a dpdk session needs the DPDK engine; none was given"
        await asyncio.wait_for(s.stop(), 1)

    run(scenario())


def test_dpdk_sessions_connect_through_connect_dpdk_with_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        seen: dict[str, Any] = {}

        async def connect_dpdk(url: str, *, engine: object, **options: Any) -> FakeConnection:
            seen["engine"] = engine
            return await net.connect(url, **options)

        async def resolve(host: str, port: int, family: int) -> list[str]:
            seen["family"] = family
            return ["192.0.2.7"]

        module = types.ModuleType("dataplane.transports.dpdk")
        module.connect_dpdk = connect_dpdk  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "dataplane.transports.dpdk", module)
        engine = object()
        s = UpstreamSession(
            1, config(transport="dpdk"), RecordingSink(), engine=engine, resolver=resolve
        )
        s.start()
        await until(lambda: s.state is State.STREAMING)
        assert seen == {"engine": engine, "family": socket.AF_INET}  # the stack is IPv4
        assert net.last.options["connect_host"] == "192.0.2.7"
        await s.stop()

    run(scenario())


def test_stop_before_start() -> None:
    async def scenario() -> None:
        s, _, events = session(FakeNetwork())
        await s.stop("never mind")
        assert s.state is State.STOPPED
        assert events.states() == ["stopping", "stopped"]

    run(scenario())


def test_recv_batch_takes_what_is_queued_and_loses_nothing() -> None:
    async def scenario() -> None:
        conn = FakeConnection(None)
        for i in range(5):
            conn.push({"n": i})
        assert len(await recv_batch(conn, 3)) == 3
        assert len(await recv_batch(conn, 10)) == 2
        # Nothing queued: the probe that would wait is abandoned without eating a message.
        conn.push({"n": 5})
        assert [m.data for m in await recv_batch(conn, 10)] == [b'{"n":5}']
        conn.push({"n": 6})
        assert (await conn.recv()).data == b'{"n":6}'
        # A close after queued messages: the messages first, then the close.
        conn.push({"n": 7})
        conn.drop(1006)
        assert len(await recv_batch(conn, 10)) == 1
        with pytest.raises(ConnectionClosed):
            await recv_batch(conn, 10)

    run(scenario())


def test_recv_batch_prefers_the_connections_own() -> None:
    class Batching(FakeConnection):
        async def recv_batch(self, max_messages: int) -> list[Message]:
            return [Message(b"own", True)]

    async def scenario() -> None:
        assert await recv_batch(Batching(None), 8) == [Message(b"own", True)]

    run(scenario())


def test_a_failing_sink_does_not_take_the_feed_down() -> None:
    class Broken(RecordingSink):
        def publish_batch(self, messages: Any) -> None:
            raise RuntimeError("hub bug")

    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        sink = Broken()
        s = UpstreamSession(
            1, config(), sink, topics=["a"], connector=net.connect, resolver=resolve_localhost
        )
        s.start()
        await until(lambda: s.state is State.STREAMING)
        for i in range(1, 4):
            net.last.push({"topic": "a", "n": i})
            await until(partial(lambda n: s.counters.messages == n, i))
        assert s.state is State.STREAMING
        assert len(net.connections) == 1
        # Each refused batch is lost, and its consumers are told (a gap of its size).
        assert s.counters.sink_refused == 3
        assert sink.log == [GapMark(1, 1, SINK_REFUSED)] * 3
        await s.stop()

    run(scenario())


def test_a_bug_in_the_read_path_fails_the_session_and_closes_the_connection() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        s, _, events = session(net)
        s.start()
        await until(lambda: s.state is State.STREAMING)

        def explode(payloads: Any) -> Any:
            raise ZeroDivisionError("oops")

        dialect = s._links[0].dialect
        assert dialect is not None
        dialect.classify_batch = explode  # type: ignore[method-assign,assignment]
        net.last.push({"topic": "a"})
        await asyncio.wait_for(s.wait_closed(), 2)
        assert s.state is State.FAILED
        assert events[-1].reason == "internal error: ZeroDivisionError: oops"
        assert net.last.close_calls == [(1011, "internal error")]
        assert no_session_tasks()

    run(scenario())


def test_a_local_error_in_housekeeping_ends_the_connection_and_the_session_reconnects() -> None:
    """A send that fails locally (LocalProtocolError) while the connection stays open: the
    housekeeper ends the connection (1011) rather than leave it without liveness checks,
    and the session reconnects through its one retry path, it does not fail."""

    async def scenario() -> None:
        from dataplane.ws.errors import LocalProtocolError

        failed: list[FakeConnection] = []

        def responder(conn: FakeConnection, data: str | bytes) -> None:
            if data == "ping" and not failed:
                failed.append(conn)
                raise LocalProtocolError("cannot send: test")
            okx_responder(conn, data)

        net = FakeNetwork(responder)
        hb = HeartbeatConfig(ping_interval_s=None, keepalive_interval_s=0.02)
        s, _, events = session(net, config("okx", heartbeat=hb), ("trades:BTC-USDT",))
        s.start()
        await until(lambda: len(net.connections) == 2)
        code, reason = net.connections[0].close_calls[0]
        assert (code, reason) == (1011, "housekeeping failed: cannot send: test")
        await until(lambda: s.counters.heartbeats >= 1)  # the new connection is looked after
        assert "failed" not in events.states()
        await s.stop()

    run(scenario())


def test_a_stop_during_an_unanswered_closing_handshake_still_closes_the_books() -> None:
    """The peer never answers our close (the feed went silent, then stop): stop cancels the
    connection's task while it waits for that handshake. What the connection's end must do
    still happens: the group hears its input is done (the C feed's last counts are taken
    at the same place; losing them failed test_feed_path_dpdk under load)."""

    class Unanswered(FakeConnection):
        def get_extra_info(self, name: str) -> Any:
            return types.SimpleNamespace(fileno=lambda: 7) if name == "socket" else None

        async def close(self, code: int = 1000, reason: str = "") -> None:
            self.close_calls.append((code, reason))
            self._end(ConnectionClosed(1006))  # the read loop ends...
            await asyncio.Event().wait()  # ...the handshake never does

    async def scenario() -> None:
        conns: list[Unanswered] = []

        async def connect(url: str, **options: Any) -> Unanswered:
            conns.append(Unanswered(generic_responder()))
            return conns[-1]

        hb = HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=0.05)
        sink = LegSink()
        s = UpstreamSession(
            5,
            config(heartbeat=hb, close_timeout_s=0.05),
            sink,
            topics=("a",),
            connector=connect,
            resolver=resolve_localhost,
        )
        s.start()
        await until(lambda: bool(conns) and bool(conns[0].close_calls))  # declared dead
        await asyncio.sleep(0.05)  # its task now waits for the closing handshake
        await s.stop()
        assert sink.inputs == [7, -1]
        assert s.connections()[0]["state"] == "stopped"

    run(scenario())
