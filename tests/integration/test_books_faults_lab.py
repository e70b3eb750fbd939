"""The last resync paths on the lab (issue #21): the feed simulator in the lab's peer
namespace, the gateway's session on a real DPDK port, the BookManager on the hub ring.

- `no_snapshot`: a venue that sends its snapshot on subscribe (Kraken, OKX) sends only the
  updates (the simulator's `nosnapshot` fault): the first update finds a book with no
  snapshot, it is reset and the topic resubscribed, and the snapshot that brings syncs it;
  when the resubscribes bring none either, the book asks again until one comes (this test
  found the book stale for good there: BookManager now resubscribes again, with backoff);
- `buffer_overflow`: Binance's REST snapshot endpoint answers 503 for a while (the
  `unavailable` fault): the book stays stale, the fetch is retried, the deltas buffered
  meanwhile overflow the buffer (MAX_BUFFERED, made small here) and the book resets; it syncs
  once the endpoint answers again;
- Bitstamp `out_of_order`: a diff sent after the one that follows it (the `reorder` fault)
  is older than the book: reset, a new REST snapshot, in sync again.

Each asserts the reset on the ring (its reason), the count in /metrics and the book equal to
the simulator's at the end (the other paths: test_books_sim_dpdk.py, test_books_sim.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from gateway.lab import Lab
from gateway.normalize import BookReset
from tests.conftest import requires_dpdk
from tests.integration import test_books_sim_dpdk as on_dpdk
from tests.integration.test_books_gateway import Gateway, metric
from tests.integration.test_books_sim import HEAD_START, VENUES, SimProcess, Venue, sim_book, until
from tests.integration.test_books_sim_dpdk import BITSTAMP, dpdk_session, lab_port

pytestmark = [requires_dpdk, pytest.mark.dpdk]
dpdk_sim = on_dpdk.dpdk_sim  # its fixtures: the simulator in the lab, the gateway on DPDK
dpdk_gateway = on_dpdk.dpdk_gateway


class Watched:
    """A dpdk session's normalized book topic, its resets on the ring and its book by REST."""

    def __init__(self, gw: Gateway, sim: SimProcess, lab: Lab, venue: Venue) -> None:
        self.gw, self.sim, self.venue = gw, sim, venue
        sim.emit(venue, HEAD_START)
        self.sid = dpdk_session(gw.control, sim, venue, lab_port(gw.control, lab))
        gw.control.subscriptions.create(
            {"session_id": self.sid, "topics": [venue.topic], "consumer": "c",
             "format": "normalized"}
        )  # fmt: skip
        self.consumer = gw.consumer(self.sid, [f"norm:{venue.topic}"])
        self.resets: list[str] = []

    def start(self) -> None:
        self.gw.control.sessions.start(self.sid)
        until(lambda: self.sim.subscribers(self.venue) > 0, "the session's subscription")

    def book(self) -> dict[str, object]:
        r = self.gw.api.get(f"/v1/books/{self.sid}/{self.venue.symbol}")
        return r.json() if r.status_code == 200 else {}  # type: ignore[no-any-return]

    def right(self, seq: int) -> Callable[[], bool]:
        want = sim_book(self.venue, seq)

        def check() -> bool:
            got = self.book()
            return bool(got) and not got["stale"] and (got["bids"], got["asks"]) == want

        return check

    def pull(self) -> list[str]:
        for message in self.consumer.read(timeout=0):
            event = getattr(message, "event", None)  # a `$gap` record is no event
            if isinstance(event, BookReset):
                self.resets.append(event.reason)
        return self.resets

    def emit_until_right(self, rounds: int, what: str, timeout: float = 30.0) -> int:
        """Bursts of updates (at least rounds: a fault's, then the resync's; a venue's
        snapshot on subscribe comes in place of an update) until the book is the
        simulator's after the last one; its number."""
        deadline = time.monotonic() + timeout
        for done in itertools.count(1):
            seq = self.sim.emit(self.venue, 5)
            time.sleep(0.1)
            if done >= rounds and self.right(seq)():
                return seq
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
        raise AssertionError("unreachable")

    def reset_seen(self, reason: str) -> None:
        until(lambda: reason in self.pull(), f"a BookReset ({reason}) on the ring")

    def assert_resynced(self, reason: str, seq: int) -> None:
        """One reset for reason reached the ring, it is counted, and the book (at seq, in
        sync) is the simulator's."""
        self.reset_seen(reason)
        assert self.pull() == [reason]
        got = self.book()
        assert got["resyncs"] == {reason: 1}
        assert got["last_reset_reason"] == reason
        assert not got["stale"]
        assert (got["bids"], got["asks"]) == sim_book(self.venue, seq)
        labels = f'reason="{reason}",session="{self.sid}",venue="{self.venue.dialect}"'
        assert metric(self.gw.api, f"wsgw_books_resyncs_total{{{labels}}}") == 1


@pytest.mark.parametrize(("venue", "count"), [("kraken", 1), ("okx", 1), ("kraken", 3)])
def test_a_subscribe_without_its_snapshot_resets_and_resubscribes(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab, venue: str, count: int
) -> None:
    """The session's subscribe brings updates only: no_snapshot, then the resubscribe's
    snapshot syncs the book. count 3: the first two resubscribes bring none either, the
    book asks again (with backoff) while updates come, and one reset went out."""
    dpdk_sim.command(cmd="fault", kind="nosnapshot", count=count, target="next")
    watched = Watched(dpdk_gateway, dpdk_sim, lab, VENUES[venue])
    watched.start()
    seq = watched.emit_until_right(4, "the book synced by the resubscribe's snapshot")
    assert dpdk_sim.command(cmd="stats")["counters"]["faults_fired"]["nosnapshot"] == 1
    watched.assert_resynced("no_snapshot", seq)


def test_a_snapshot_endpoint_down_for_a_while_overflows_the_buffer_then_syncs(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Binance's /api/v3/depth answers 503 until the fault is cleared: the book stays
    stale and its fetch is retried; the deltas buffered meanwhile overflow (40 here):
    buffer_overflow; then the endpoint answers and the book is the simulator's."""
    monkeypatch.setattr("gateway.books.manager.RESYNC_BACKOFF_MAX", 0.5)  # retries sooner
    monkeypatch.setattr("gateway.books.sync.MAX_BUFFERED", 40)
    books = dpdk_gateway.control.books
    dpdk_sim.command(cmd="fault", kind="unavailable", count=1000)
    watched = Watched(dpdk_gateway, dpdk_sim, lab, VENUES["binance"])
    watched.start()
    dpdk_sim.emit(watched.venue, 5)
    until(lambda: books.fetches[("binance", "failed")] >= 2, "503s, retried")
    assert books.fetches[("binance", "ok")] == 0
    assert watched.book().get("stale", True)
    assert watched.pull() == []  # a failed fetch is no reset: the book has had none yet
    dpdk_sim.emit(watched.venue, 40)  # 45 buffered: one past the buffer
    watched.reset_seen("buffer_overflow")
    assert watched.book().get("stale", True)
    dpdk_sim.command(cmd="clear")
    seq = watched.emit_until_right(2, "the book synced once the endpoint answers")
    assert books.fetches[("binance", "ok")] >= 1
    watched.assert_resynced("buffer_overflow", seq)


def test_a_bitstamp_diff_out_of_order_resyncs(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab
) -> None:
    """A diff that leaves after the one that follows it is older than the book (its
    microtimestamp): out_of_order, a new REST snapshot, the simulator's book again."""
    books = dpdk_gateway.control.books
    urls = {**books.config.snapshot_urls, "bitstamp": dpdk_sim.base}
    books.config = replace(books.config, snapshot_urls=urls)
    watched = Watched(dpdk_gateway, dpdk_sim, lab, BITSTAMP)
    watched.start()
    watched.emit_until_right(2, "the book in sync")
    assert watched.pull() == []
    dpdk_sim.command(cmd="fault", kind="reorder")
    seq = watched.emit_until_right(4, "the book right again after the swapped diffs")
    assert dpdk_sim.command(cmd="stats")["counters"]["faults_fired"]["reorder"] == 1
    watched.assert_resynced("out_of_order", seq)
