"""Sessions against the simulator's faults, over the kernel transport on loopback: a
dropped connection, a stalled feed, protocol violations, exchange reconnect notices,
refused topics, live unsubscribes, topics split over connections, wss:// with the
simulator's CA, and a clean stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.dialects import GenericConfig, Limits, make_dialect
from gateway.sessions import HeartbeatConfig, ReconnectPolicy, State, TlsOptions, system_resolve
from gateway.simulator import Fault, SimConfig, Simulator
from tests.integration.test_sessions_helpers import (
    check_order,
    counts,
    fast_config,
    running,
    seqs,
    until,
)
from tests.integration.test_simulator_helpers import BAD_TOPICS, SYMBOLS, TOPICS, run


def url_of(sim: Simulator, name: str) -> str:
    return sim.url(name, make_dialect(name).path)


@pytest.mark.parametrize("name", ["binance", "okx", "kraken"])
def test_a_dropped_connection_reconnects_resubscribes_once_and_reports_one_gap(
    name: str,
) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0)) as sim:
            topics = TOPICS[name]
            async with running(fast_config(url_of(sim, name), name), topics) as (s, sink, ev):
                have = counts(sink, list(s.topics))
                await until(lambda: have(20))
                requests_first = s.counters.subscribe_requests
                sim.inject(Fault("drop", after=10))
                await until(lambda: s.counters.connects == 2 and s.state is State.STREAMING)
                resumed = {t: len(sink.messages(t)) for t in s.topics}
                await until(lambda: all(len(sink.messages(t)) > resumed[t] + 20 for t in s.topics))
                # The simulator's view: one connection, every topic once, one subscriber each.
                (conn,) = sim.connections.values()
                assert conn.topics == set(s.topics)
                assert all(len(sim.publishers[(name, t)].subscribers) == 1 for t in s.topics)
                assert s.counters.subscribe_requests == 2 * requests_first
            assert check_order(sink, list(s.topics)) == 1  # in order; jumps only at the gap
            (gap,) = sink.gaps()
            assert gap.session_id == 1
            assert gap.lost is None
            assert gap.reason.startswith("reconnect: close code 1006")
            assert len(ev.of("gap")) == 1
            backoff = ev.entered("backoff")
            assert len(backoff) == 1
            assert backoff[0].details["close_code"] == 1006
            assert ev.states() == [
                "connecting", "subscribing", "streaming",
                "backoff", "connecting", "subscribing", "streaming",
                "stopping", "stopped",
            ]  # fmt: skip
            assert (s.counters.reconnects, s.counters.gaps) == (1, 1)

    run(scenario())


def test_a_stalled_feed_is_dead_even_while_pings_are_answered() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            hb = HeartbeatConfig(ping_interval_s=0.1, ping_timeout_s=3.0, dead_feed_timeout_s=0.5)
            config = fast_config(url_of(sim, "binance"), "binance", heartbeat=hb)
            async with running(config, ["btcusdt@trade"]) as (s, sink, events):
                await until(lambda: len(sink.messages()) >= 10)
                sim.inject(Fault("stall", after=5, seconds=4.0))
                await until(lambda: s.counters.connects == 2 and s.state is State.STREAMING, 3.5)
                (backoff,) = events.entered("backoff")
                assert "no data" in backoff.reason
                assert backoff.details["close_code"] == 1011  # ours, echoed by the server
                assert s.counters.pongs > 0  # the server kept answering pings meanwhile
                before = len(sink.messages())
                await until(lambda: len(sink.messages()) > before + 10)
            assert check_order(sink, ["btcusdt@trade"]) == 1

    run(scenario())


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (Fault("malformed", after=5, variant="rsv"), 1002),
        (Fault("malformed", after=5, variant="mask"), 1002),
        (Fault("opcode", after=5), 1002),
        (Fault("malformed", after=5, variant="utf8"), 1007),
        (Fault("oversized", after=5, size=200_000), 1009),
    ],
    ids=["rsv", "mask", "opcode", "utf8", "oversized"],
)
def test_a_protocol_violation_closes_with_its_code_and_reconnects(fault: Fault, code: int) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            config = fast_config(url_of(sim, "binance"), "binance", max_message_size=64 * 1024)
            async with running(config, ["btcusdt@trade"]) as (s, sink, events):
                await until(lambda: len(sink.messages()) >= 10)
                sim.inject(fault)
                await until(lambda: s.counters.connects == 2 and s.state is State.STREAMING)
                before = len(sink.messages())
                await until(lambda: len(sink.messages()) > before + 10)
            (backoff,) = events.entered("backoff")
            assert backoff.details["close_code"] == code
            assert backoff.reason.startswith(f"connection lost: close code {code}")
            assert check_order(sink, ["btcusdt@trade"]) == 1

    run(scenario())


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("bitstamp", "bts:request_reconnect"),
        ("okx", "The connection will soon be closed"),
        ("binance", "serverShutdown"),
    ],
)
def test_an_exchange_reconnect_notice_is_honoured_at_once(name: str, detail: str) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            topics = TOPICS[name][:2]
            async with running(fast_config(url_of(sim, name), name), topics) as (s, sink, ev):
                await until(lambda: counts(sink, list(s.topics))(10))
                sim.inject(Fault("notice", after=3))
                await until(lambda: s.counters.connects == 2 and s.state is State.STREAMING)
                before = len(sink.messages())
                await until(lambda: len(sink.messages()) > before + 10)
                (conn,) = sim.connections.values()
                assert conn.topics == set(s.topics)
            (notice,) = ev.of("notice")
            assert notice.reason.startswith("exchange requested reconnect")
            assert detail in notice.reason
            assert not ev.entered("backoff")  # no wait: the exchange asked
            assert len(sink.gaps()) == 1
            assert check_order(sink, list(s.topics)) == 1

    run(scenario())


@pytest.mark.parametrize("name", list(TOPICS))
def test_a_refused_topic_is_an_event_and_marked_failed(name: str) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=100.0, symbols=SYMBOLS)) as sim:
            good = TOPICS[name][:1]
            async with running(fast_config(url_of(sim, name), name), good) as (s, sink, ev):
                await until(lambda: s.state is State.STREAMING)
                (bad,) = s.subscribe([BAD_TOPICS[name]])
                await until(lambda: bool(ev.of("subscribe_error")))
                (refusal,) = ev.of("subscribe_error")
                assert refusal.details["topics"] == [bad]
                assert refusal.details["exchange_reason"]  # the exchange's own words
                assert bad in refusal.reason
                assert s.failed_topics == {bad: refusal.details["exchange_reason"]}
                assert s.topics == tuple(good)
                assert s.counters.subscribe_errors == 1
                before = len(sink.messages())
                await until(lambda: len(sink.messages()) > before + 5)  # the rest flows on
                assert s.state is State.STREAMING

    run(scenario())


def test_unsubscribe_while_running() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            topics = TOPICS["binance"]
            config = fast_config(url_of(sim, "binance"), "binance")
            async with running(config, topics) as (s, sink, _):
                await until(lambda: counts(sink, topics)(5))
                assert s.unsubscribe([topics[0]]) == [topics[0]]
                (conn,) = sim.connections.values()
                await until(lambda: conn.topics == set(topics[1:]))
                stopped_at = len(sink.messages(topics[0]))
                others = len(sink.messages(topics[1]))
                await until(lambda: len(sink.messages(topics[1])) > others + 20)
                assert len(sink.messages(topics[0])) <= stopped_at + 1  # one may be in flight
                assert s.topics == tuple(topics[1:])

    run(scenario())


def test_topics_are_split_over_connections_at_the_cap() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            generic = GenericConfig(limits=Limits(max_topics_per_connection=2))
            config = fast_config(
                sim.url("generic", "/"), "generic", dialect_options={"config": generic}
            )
            topics = ["trades.A", "trades.B", "trades.C", "trades.D", "trades.E"]
            async with running(config, topics) as (s, sink, _):
                await until(lambda: counts(sink, topics)(20) and s.state is State.STREAMING)
                held = sorted(sorted(c.topics) for c in sim.connections.values())
                assert held == [["trades.A", "trades.B"], ["trades.C", "trades.D"], ["trades.E"]]
                s.unsubscribe(["trades.E"])  # its connection has nothing left: it closes
                await until(lambda: len(sim.connections) == 2)
            assert check_order(sink, topics) == 0
            for topic in topics:
                assert seqs(sink, topic)[0] == 1

    run(scenario())


def test_wss_with_the_simulators_ca(tmp_path: Path) -> None:
    async def scenario() -> None:
        config_sim = SimConfig(rate=200.0, tls=True, cert_dir=tmp_path)
        async with Simulator(config_sim) as sim:
            assert sim.tls is not None
            url = url_of(sim, "okx")
            assert url.startswith("wss://127.0.0.1:")
            tls = TlsOptions(verify=True, ca_file=str(sim.tls.ca))
            topics = TOPICS["okx"]
            async with running(fast_config(url, "okx", tls=tls), topics) as (_, sink, _):
                await until(lambda: counts(sink, topics)(20))
            assert check_order(sink, topics) == 0
            # Without the test CA (system CAs only) verification fails, and says so.
            policy = ReconnectPolicy(initial_delay_s=0.01, max_delay_s=0.01, max_attempts=1)
            untrusted = fast_config(url, "okx", reconnect=policy)
            async with running(untrusted, topics, session_id=2) as (s2, _, events):
                await until(lambda: s2.state is State.FAILED)
            assert "TLS certificate rejected" in events[-1].reason

    run(scenario())


def test_stop_sends_a_normal_close() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=100.0)) as sim:
            config = fast_config(url_of(sim, "bybit"), "bybit")
            async with running(config, TOPICS["bybit"]) as (_, sink, _):
                await until(lambda: len(sink.messages()) >= 5)
                (conn,) = sim.connections.values()
            assert conn.ws.close_code == 1000
            assert conn.ws.close_reason == "stop requested"
            await until(lambda: not sim.connections)

    run(scenario())


def test_a_host_name_goes_through_the_system_resolver(tmp_path: Path) -> None:
    async def scenario() -> None:
        addresses = await system_resolve("localhost", 443)
        assert "127.0.0.1" in addresses
        config_sim = SimConfig(rate=200.0, tls=True, cert_dir=tmp_path)
        async with Simulator(config_sim) as sim:
            assert sim.tls is not None
            # The name is checked against the certificate; an address the simulator does not
            # listen on (::1, when localhost has it) is refused and the next one tried.
            url = f"wss://localhost:{sim.port}/kraken/v2"
            tls = TlsOptions(ca_file=str(sim.tls.ca))
            topics = TOPICS["kraken"][:1]
            async with running(fast_config(url, "kraken", tls=tls), topics) as (s, sink, ev):
                await until(lambda: len(sink.messages()) >= 10)
                assert s.counters.connect_failures == 0
                subscribing = ev.entered("subscribing")[0]
                assert subscribing.details["address"] == "127.0.0.1"

    run(scenario())
