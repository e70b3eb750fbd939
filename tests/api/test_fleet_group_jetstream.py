"""A feed group's legs on two fleet nodes (issues #19, #20): three `wsgw serve` nodes on a
throwaway PostgreSQL database and one `nats-server -js`, kernel transport, the simulator
serving one Binance stream to both legs. The placement puts the legs on different nodes;
both nodes publish the group's winners under the group's hub id with the message id
`<hub id>:<topic>:<trade id>`, so the stream stores one copy. One leg's node is killed
(kill -9) while it streams: a durable JetStream consumer of the group gets every trade
exactly once, in order, none lost (the other leg kept streaming)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.groups.feed import group_hub_id
from gateway.simulator.process import local_simulator
from tests.integration.test_jetstream_durable import Consumer
from tests.integration.test_nats_sink import wait_until
from wsgw_bench import gateways
from wsgw_bench.gateways import ServeGateway, closing_with_logs, create_sessions, jetstream_nats
from wsgw_bench.servers import NatsServer, nats_server_binary

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None,
    reason="nats-server is not installed (apt-get install nats-server)",
)
LEASE_S = 3.0
TOPIC = "btcusdt@trade"
RATE = 200  # trades per second


@pytest.fixture
def simulator() -> Iterator[int]:
    with local_simulator(RATE) as port:
        yield port


def fleet_nodes(
    pg_url: str, nats_url: str, tmp: Path, names: tuple[str, ...]
) -> list[ServeGateway]:
    """Fleet nodes (not started) on one database, publishing to the JetStream stream E2E."""
    return gateways.fleet_nodes(pg_url, jetstream_nats(nats_url, "E2E"), tmp, names, LEASE_S)


def stream_on(consumer: Consumer) -> None:
    """Wait until the consumer got two seconds more of trades, then one more second (what
    is still on its way)."""
    count = len(consumer.got)
    wait_until(lambda: len(consumer.got) >= count + 2 * RATE, 30)
    time.sleep(1.0)


def where(nodes: list[ServeGateway], sessions: list[int]) -> dict[int, list[str]]:
    """session -> the nodes that run it connected."""
    running = {node.name: node.connected() for node in nodes}
    return {sid: [name for name, sids in running.items() if sid in sids] for sid in sessions}


def test_a_group_with_legs_on_two_nodes_loses_nothing_when_one_node_dies(
    pg_url: str, simulator: int, tmp_path: Path
) -> None:
    with NatsServer(jetstream=True) as nats:
        nodes = fleet_nodes(pg_url, nats.url, tmp_path, ("n1", "n2", "n3"))
        consumer: Consumer | None = None
        try:
            with closing_with_logs(nodes):
                first = nodes[0]
                first.start()  # it migrates the database; the others start side by side
                for node in nodes[1:]:
                    node.start(wait=False)
                for node in nodes[1:]:
                    node.wait_ready()
                legs = create_sessions(first, simulator, 2, TOPIC, prefix="leg",
                                       placement={"zone": "lab"}, start=False)  # fmt: skip
                group = first.post("/v1/groups", {"name": "btc", "legs": legs})
                hub = group_hub_id(int(group["id"]))
                for sid in legs:
                    first.post(f"/v1/sessions/{sid}/start")

                def apart() -> bool:
                    placed = where(nodes, legs)
                    return all(len(p) == 1 for p in placed.values()) and (
                        placed[legs[0]] != placed[legs[1]]
                    )

                wait_until(apart, 60)
                consumer = Consumer(nats.url, "group", stream="E2E", session=str(hub))
                consumer.start()
                wait_until(lambda: len(consumer.got) >= 2 * RATE, 30)

                victim = next(n for n in nodes if n.name == where(nodes, legs)[legs[0]][0])
                victim.kill()  # kill -9 the node of leg 0, mid-stream
                others = [n for n in nodes if n is not victim]
                wait_until(
                    lambda: all(len(p) == 1 for p in where(others, legs).values()), 6 * LEASE_S
                )
                moved_to = where(others, legs)
                stream_on(consumer)
        finally:
            if consumer is not None:
                consumer.kill()
    got = [line for line in consumer.got if line not in ("restart", "gap")]
    trades = [int(t) for t in got]
    print(f"{len(trades)} trades {trades[0]}..{trades[-1]}; after the kill: {moved_to}; "
          f"events {[x for x in consumer.got if x in ('restart', 'gap')]}")  # fmt: skip
    assert len(trades) == len(set(trades)), "a trade delivered twice"
    assert trades == list(range(trades[0], trades[0] + len(trades))), "a trade lost or reordered"
    assert moved_to[legs[0]] != moved_to[legs[1]], "the legs share a node after the failover"
