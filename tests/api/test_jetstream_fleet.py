"""JetStream across a fleet (issue #20): three `wsgw serve` nodes on a throwaway PostgreSQL
database publish their sessions (Binance trades of the simulator) into one stream of a real
`nats-server -js`; an owner is killed (kill -9), another paused past its lease and woken
(SIGSTOP, SIGCONT: it held unpublished messages). The stream holds each trade of a session
at most once (the message ids), and a durable consumer in its own process gets every stored
message once, in stream order. What a session's venue sent while it had no owner is lost
upstream (one leg per session here); the test prints those counts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

from tests.integration.nats_helpers import Subscriber, needs_nats
from tests.integration.test_jetstream_durable import Consumer
from tests.integration.test_nats_sink import wait_until
from wsgw_bench.gateways import (
    ServeGateway,
    closing_with_logs,
    create_sessions,
    fleet_nodes,
    jetstream_nats,
)
from wsgw_bench.servers import NatsServer

pytestmark = needs_nats
STREAM = "E2E"
LEASE_S = 3.0
SESSIONS = 3
TOPIC = "btcusdt@trade"


def stored(url: str) -> list[str]:
    """`<session>:<trade id>` of every trade in the stream, in stream order."""

    async def read() -> list[str]:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        info = await js.stream_info(STREAM)
        got: list[str] = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            if not info.state.messages:
                break
            msg = await js.get_msg(STREAM, seq)
            if msg.subject and msg.subject.endswith(TOPIC):
                sid = msg.subject.split(".")[1]
                got.append(f"{sid}:{json.loads(msg.data or b'{}')['data']['t']}")
        await nc.close()
        return got

    return asyncio.run(read())


def owners(nodes: list[ServeGateway]) -> dict[int, list[str]]:
    where: dict[int, list[str]] = defaultdict(list)
    for node in nodes:
        for sid in node.connected():
            where[sid].append(node.name)
    return where


def test_an_owner_kill_and_a_stale_owner_store_each_trade_once(
    pg_url: str, simulator: int, tmp_path: Path
) -> None:
    with NatsServer(jetstream=True) as nats:
        settings = jetstream_nats(nats.url, STREAM) | {"headers": True}  # Wsgw-Gen
        nodes = fleet_nodes(pg_url, settings, tmp_path, ("n1", "n2", "n3"), LEASE_S)
        consumer = Consumer(nats.url, "fleet", stream=STREAM, session="all")
        wire: Subscriber | None = None  # every copy any node publishes (core NATS)
        try:
            with closing_with_logs(nodes):
                for node in nodes:  # the first migrates the database
                    node.start()
                first = nodes[0]
                wait_until(lambda: isinstance(stored(nats.url), list), 20)
                consumer.start()
                wire = Subscriber(nats.url, [f"wsgw.*.{TOPIC}"])
                sessions = create_sessions(first, simulator, SESSIONS, TOPIC, prefix="js",
                                           placement={"zone": "lab"})  # fmt: skip
                wait_until(lambda: all(len(owners(nodes).get(s, [])) == 1 for s in sessions), 60)
                wait_until(lambda: len(stored(nats.url)) >= 300, 30)

                where = owners(nodes)
                victim = next(n for n in nodes if any(where[s] == [n.name] for s in sessions))
                others = [n for n in nodes if n is not victim]
                victim.kill()  # kill -9 an owner
                wait_until(lambda: set(sessions) <= set(owners(others)), 6 * LEASE_S)

                where = owners(others)
                paused = next(n for n in others if any(where[s] == [n.name] for s in sessions))
                survivor = next(n for n in others if n is not paused)
                held = {s for s in sessions if where[s] == [paused.name]}
                assert paused.proc is not None
                os.kill(paused.proc.pid, signal.SIGSTOP)  # past its lease, holding messages
                wait_until(lambda: held <= survivor.connected(), 6 * LEASE_S)
                time.sleep(LEASE_S)
                os.kill(paused.proc.pid, signal.SIGCONT)
                wait_until(lambda: not (paused.connected() & held), 6 * LEASE_S)
                time.sleep(2.0)
                for node in nodes:
                    node.kill()
                in_stream = stored(nats.url)
                consumer.wait_for(len(in_stream))
                time.sleep(0.5)  # nothing more comes
                got = [x for x in consumer.got if ":" in x]  # not "restart" (each node a run)
                wire.close()
                published = len(wire.got)
        finally:
            if wire is not None:
                wire.close()
            consumer.kill()
    per_session: dict[str, list[int]] = defaultdict(list)
    for item in in_stream:
        session, trade = item.split(":")
        per_session[session].append(int(trade))
    holes = {name: max(ids) - min(ids) + 1 - len(set(ids)) for name, ids in per_session.items()}
    print(
        f"published {published}, stored {len(in_stream)} trades (copies dropped by id: "
        f"{published - len(in_stream)}); lost upstream while unowned, per session: {holes}"
    )
    for name, ids in per_session.items():
        assert len(ids) == len(set(ids)), f"session {name}: a trade stored twice"
    assert got == in_stream  # the durable consumer: every stored trade once, in order
