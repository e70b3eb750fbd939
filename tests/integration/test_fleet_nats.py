"""A fleet node's NATS messages carry the session's lease generation (Wsgw-Gen, with the
headers on), so a consumer can drop a stale owner's messages; a session without a lease
here (None) carries none. Against a real nats-server of our own."""

from __future__ import annotations

from gateway.hub import Hub
from gateway.hub.nats import NatsConfig, NatsSink
from tests.integration.nats_helpers import Subscriber, needs_nats, wait_until
from wsgw_bench.servers import NatsServer

pytestmark = needs_nats


def test_headers_carry_the_lease_generation(nats_server: NatsServer) -> None:
    generations = {1: 4}
    config = NatsConfig(servers=[nats_server.url], headers=True, generation=generations.get)
    hub = Hub(nats=NatsSink(config).start(10))
    sub = Subscriber(nats_server.url, ["wsgw.>"])
    try:
        first = hub.publish_batch([(1, "t", b"x", 111, None), (2, "t", b"y", 222, None)])
        wait_until(lambda: len(sub.got) == 2)
    finally:
        sub.close()
        hub.close()
    assert sorted((s, h) for s, _, h in sub.got) == [
        ("wsgw.1.t", {"Wsgw-Seq": str(first), "Wsgw-Recv-Ts": "111", "Wsgw-Gen": "4"}),
        ("wsgw.2.t", {"Wsgw-Seq": str(first + 1), "Wsgw-Recv-Ts": "222"}),
    ]
