"""Every dialect end to end over the kernel transport against the simulator: N topics
subscribed, every message of each topic delivered in order with contiguous sim_seq, no gap;
the optional exchange sequence check sees the simulator's numbers."""

from __future__ import annotations

import pytest

from gateway.dialects import make_dialect
from gateway.sessions import State
from gateway.simulator import SimConfig, Simulator
from tests.integration import test_sessions_helpers as sh
from tests.integration.test_simulator_helpers import TOPICS, run

PER_TOPIC = 40


@pytest.mark.parametrize("name", list(TOPICS))
def test_every_message_in_order(name: str) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            url = sim.url(name, make_dialect(name).path)
            topics = TOPICS[name]
            async with sh.running(sh.fast_config(url, name), topics) as (session, sink, events):
                await sh.until(lambda: sh.counts(sink, list(session.topics))(PER_TOPIC))
                assert session.state is State.STREAMING
                assert events.states() == ["connecting", "subscribing", "streaming"]
                # The sim serves the session's spelling of each topic, one connection.
                (conn,) = sim.connections.values()
                assert conn.topics == set(session.topics)
            for topic in session.topics:
                got = sh.seqs(sink, topic)
                assert got == list(range(1, len(got) + 1)), topic  # from the first, no gap
            assert sh.check_order(sink, list(session.topics)) == 0
            c = session.counters
            assert c.messages == len(sink.messages()) == sum(c.topic_messages.values())
            assert (c.gaps, c.reconnects, c.subscribe_errors) == (0, 0, 0)
            assert c.batches <= c.messages

    run(scenario())


@pytest.mark.parametrize(
    ("name", "topic"), [("okx", "books5:ETH-USDT"), ("binance", "ethusdt@depth")]
)
def test_exchange_sequence_numbers_reach_the_sink(name: str, topic: str) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            url = sim.url(name, make_dialect(name).path)
            config = sh.fast_config(url, name, sequence_check=True)
            async with sh.running(config, [topic]) as (session, sink, _):
                await sh.until(lambda: sh.counts(sink, [topic])(PER_TOPIC))
            messages = sink.messages(topic)
            # The simulator's book updates carry seqId/prevSeqId (OKX), U/u (Binance) = seq.
            assert [m[4] for m in messages] == sh.seqs(sink, topic)
            assert session.counters.sequence_gaps == 0

    run(scenario())
