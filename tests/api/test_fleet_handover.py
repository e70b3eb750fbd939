"""Make-before-break (issue #20): a drain hands a single-leg session to another node, which
connects it first and takes the lease over once it streams; the drained node stops after.
Two `wsgw serve` nodes on a throwaway PostgreSQL database and one `nats-server -js`: a
durable JetStream consumer of the session gets every trade exactly once, in order, none
lost across the hand-over (both nodes publish for a moment, with the same message ids)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.api.test_fleet_group_jetstream import (
    RATE,
    TOPIC,
    fleet_nodes,
    pytestmark,
    simulator,
    stream_on,
    where,
)
from tests.integration.test_jetstream_durable import Consumer
from tests.integration.test_nats_sink import wait_until
from wsgw_bench.gateways import closing_with_logs, create_sessions
from wsgw_bench.servers import NatsServer

__all__ = ["pytestmark", "simulator"]  # the skip mark and the fixture, shared


def test_a_drain_hands_a_session_over_without_a_gap(
    pg_url: str, simulator: int, tmp_path: Path
) -> None:
    with NatsServer(jetstream=True) as nats:
        nodes = fleet_nodes(pg_url, nats.url, tmp_path, ("d1", "d2"))
        consumer: Consumer | None = None
        try:
            with closing_with_logs(nodes):
                for node in nodes:
                    node.start()
                first = nodes[0]
                (sid,) = create_sessions(first, simulator, 1, TOPIC, placement={"zone": "lab"})
                wait_until(lambda: len(where(nodes, [sid])[sid]) == 1, 60)
                consumer = Consumer(nats.url, "drain", stream="E2E", session=str(sid))
                consumer.start()
                wait_until(lambda: len(consumer.got) >= 2 * RATE, 30)

                owner = next(n for n in nodes if where(nodes, [sid])[sid] == [n.name])
                other = next(n for n in nodes if n is not owner)
                owner.post("/v1/fleet/drain")
                wait_until(lambda: where(nodes, [sid])[sid] == [other.name], 30)
                leases = httpx.get(f"http://127.0.0.1:{other.port}/v1/fleet/leases").json()
                stream_on(consumer)
        finally:
            if consumer is not None:
                consumer.kill()
    trades = [int(t) for t in consumer.got if t not in ("restart", "gap")]
    print(f"{len(trades)} trades {trades[0]}..{trades[-1]}; leases {leases}")
    assert len(trades) == len(set(trades)), "a trade delivered twice"
    assert trades == list(range(trades[0], trades[0] + len(trades))), "a trade lost or reordered"
