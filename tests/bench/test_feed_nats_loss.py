"""`feed`'s NATS accounting (issue #16, "0 lost in every run"): a window says where its
messages were lost. The counts at each hop and the verdict from made-up counters, then
against a real nats-server: its monitoring endpoint counts what the gateway's sink sent, as
the sink's own counter does, C path on and off."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator

import pytest

from gateway.hub import Hub
from gateway.hub.nats import NatsConfig, NatsSink
from tests.bench.test_feed import _message
from tests.integration.nats_helpers import needs_nats, wait_until
from wsgw_bench.feed import (
    NATS_HOPS,
    NatsMonitor,
    Tally,
    Window,
    nats_loss_where,
    nats_window,
)
from wsgw_bench.servers import NatsServer


def counters(**over: int) -> dict[str, object]:
    base: dict[str, object] = dict.fromkeys(NATS_HOPS[:-1], 0)
    base.update({"nats dropped": {"buffer_full": 0}, "nats reconnects": 0})
    base.update({"sim drops": 0, "reconnects": 0})
    base.update(dict.fromkeys(("slow consumers", "subscriber closed slow", "sink closed slow"), 0))
    base.update(over)
    return base


def window(lost: int, events: dict[str, int], hops: dict[str, int]) -> Window:
    return Window(1e5, 5.0, 10, lost, 0, [], [], [], events=events, hops=hops)


def test_a_windows_hops_and_where_its_losses_happened() -> None:
    before = counters()
    after = counters(**{"sim emitted": 500, "sim written": 300, "ring": 290, "nats sent": 280})
    after["nats dropped"] = {"buffer_full": 10}
    after["subscriber closed slow"] = 1
    hops, events = nats_window(before, after, 200)
    assert list(hops) == list(NATS_HOPS)
    assert (hops["sim emitted"], hops["nats sent"], hops["consumer"]) == (500, 280, 200)
    assert events["nats sink dropped buffer_full"] == 10
    assert events["nats-server subscriber closed slow"] == 1
    assert events["upstream: session dropped by the simulator"] == 0
    where = nats_loss_where(window(300, events, hops))
    assert "upstream" not in where and "sink dropped 10" in where
    after["sim drops"] = 1  # between two windows: counted from the last one's end
    hops, events = nats_window(before, after, 200)
    assert events["upstream: session dropped by the simulator"] == 1
    where = nats_loss_where(window(300, events, hops))
    assert "upstream" in where and "200 made, not written" in where
    assert "sink dropped 10" in where and "nats-server dropped the subscriber" in where
    # Nothing counted a loss the subscriber saw: said so, not blamed on anyone.
    _, quiet = nats_window(before, counters(), 0)
    assert nats_loss_where(window(5, quiet, hops)) == "unexplained"
    # A drop at the end of the window before shows as this window's jump.
    dropped_before = window(0, {"dropped by the simulator": 1}, hops)
    assert nats_loss_where(window(5, quiet, hops), dropped_before).startswith("upstream")
    assert nats_loss_where(window(0, quiet, hops)) == ""


def test_a_loss_that_shows_in_the_warm_up_counts_in_the_next_window() -> None:
    """A sequence jump seen before a window opens (the warm-up after a rate change: a
    reconnect at 100k msg/s shows there) is that window's loss, not nobody's; the message
    itself is not counted or timed."""
    ours, theirs = mp.Pipe()
    tally = Tally(ours)
    tally.pending.append((1_000, 2_000))  # as its control thread does for ("window", ...)
    tally.tick(500)
    tally.see(600, _message("a@trade", 1, 100), "a@trade")
    tally.see(700, _message("a@trade", 50, 200), "a@trade")  # 48 lost, before the window
    tally.see(1_100, _message("a@trade", 51, 1_000), "a@trade")
    tally.tick(2_001)
    kind, result = theirs.recv()
    assert kind == "result"
    assert (result["count"], result["lost"], result["events"]) == (1, 48, {"seq jumps": 1})
    theirs.send(("stop",))


@pytest.fixture
def monitored() -> Iterator[tuple[NatsServer, NatsMonitor]]:
    with NatsServer(monitor=True) as server:
        assert server.monitor_port is not None
        yield server, NatsMonitor(server.monitor_port)


@needs_nats
@pytest.mark.parametrize("c_path", [True, False], ids=["C", "nats-py"])
def test_the_server_counts_what_the_sink_says_it_sent(
    monitored: tuple[NatsServer, NatsMonitor], c_path: bool
) -> None:
    server, monitor = monitored
    sink = NatsSink(NatsConfig(servers=[server.url], c_path=c_path)).start(10)
    hub = Hub(nats=sink)
    try:
        assert sink.c_path == c_path
        for j in range(0, 3000, 30):
            hub.publish_batch([(1, "btcusdt@trade", b"%d" % k, 0, None) for k in range(j, j + 30)])
        wait_until(lambda: monitor.snapshot()["server in"] == 3000)
        assert sink.stats.published == 3000 and sum(sink.dropped.values()) == 0
    finally:
        hub.close()
