"""read_batch's wait and read in one C call (wsgw_ring_read_wait, issue #16) against the old
path (a wait call, then a read call: `fused_wait = False`): the same records, the same gaps,
the same filtering, on the same ring; an interrupt and a close end it as they end a wait."""

from __future__ import annotations

import random
import threading
import time

import pytest
from ring_helpers import RingModel, payload_for

from dataplane.ring import Gap, RingEvent, RingMessage, RingReader, RingWriter
from gateway.client.ring import READER_SLICE_NS

PROMPT = 0.1


def reader(name: str, fused: bool, topics: list[str] | None = None) -> RingReader:
    """The new path (one call, with the waiting thread given a short slice) or the
    old one (wait then read, the thread's own slice)."""
    r = RingReader.attach(
        name, topics, start="oldest", max_batch=16, slice_ns=READER_SLICE_NS if fused else None
    )
    r.fused_wait = fused
    return r


def plain(events: list[RingEvent]) -> list[tuple[object, ...]]:
    """Events as comparable tuples (payload views copied)."""
    return [
        (e.seq, e.session_id, e.topic, e.ts_ns, bytes(e.payload), e.topic_id)
        if isinstance(e, RingMessage)
        else tuple(e)
        for e in events
    ]


def drain(r: RingReader, waiting: bool) -> list[RingEvent]:
    """Everything there now; waiting: through read_batch with a timeout (the fused call when
    the first look finds nothing), else polls."""
    out: list[RingEvent] = []
    while True:
        batch = r.read_batch(timeout=0.01 if waiting else 0.0)
        if not batch:
            return out
        out += [
            e._replace(payload=bytes(e.payload)) if isinstance(e, RingMessage) else e for e in batch
        ]


def test_old_and_new_path_give_the_same_records_and_gaps(name: str) -> None:
    """Writes of random sizes that lap both readers several times, topics filtered and
    registered between reads: both paths report identical events."""
    rng = random.Random(16)
    cap = 1 << 13
    model = RingModel(cap)
    with (
        RingWriter.create(name, cap) as w,
        reader(name, fused=False, topics=["a*", "late"]) as old,
        reader(name, fused=True, topics=["a*", "late"]) as new,
    ):
        topics = [w.register_topic(t) for t in ("a1", "b1", "a2")]
        total_old: list[RingEvent] = []
        total_new: list[RingEvent] = []
        for step in range(60):
            if step == 20:
                topics.append(w.register_topic("late"))  # a topic the C filter has not seen
            lengths = [rng.randrange(0, 400) for _ in range(rng.choice((1, 3, 20, 60)))]
            first = model.write_batch(lengths)
            w.write_batch(
                [(7, rng.choice(topics), payload_for(first + i, n)) for i, n in enumerate(lengths)]
            )
            total_old += drain(old, waiting=False)
            total_new += drain(new, waiting=True)
        assert plain(total_new) == plain(total_old)
        gaps = [e for e in total_new if isinstance(e, Gap)]
        assert gaps and sum(g.lost for g in gaps) > 0  # the readers were lapped
        assert {e.topic for e in total_new if isinstance(e, RingMessage)} <= {"a1", "a2", "late"}


def test_a_lapped_waiting_reader_reports_the_exact_loss(name: str) -> None:
    """Readers asleep in read_batch while the writer laps them: whatever each one saw, its
    gaps and messages cover every sequence once, in order, with intact payloads."""
    cap = 1 << 12
    model = RingModel(cap)
    with RingWriter.create(name, cap) as w:
        readers = [reader(name, fused=f) for f in (False, True)]
        seen: list[list[RingEvent]] = [[], []]

        def read(i: int) -> None:
            r = readers[i]
            while True:
                batch = r.read_batch(max=4, timeout=2.0)
                seen[i] += [
                    e._replace(payload=bytes(e.payload)) if isinstance(e, RingMessage) else e
                    for e in batch
                ]
                if not batch or r.closed:
                    return

        threads = [threading.Thread(target=read, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        time.sleep(0.05)
        for _ in range(5):
            lengths = [200] * 60  # 3.5 rings in one call
            first = model.write_batch(lengths)
            w.write_batch([(1, 0, payload_for(first + i, n)) for i, n in enumerate(lengths)])
            time.sleep(0.02)
        last = model.seq
        w.close(unlink=False)
        for t in threads:
            t.join(10)
        for r in readers:
            r.close()
    for events in seen:
        assert any(isinstance(e, Gap) for e in events)  # lapped: 3.5 rings in one write
        expect = 1
        for e in events:
            if isinstance(e, Gap):
                assert e.first_seq == expect and e.lost > 0
                expect += e.lost
            else:
                assert e.seq == expect
                assert e.payload == payload_for(e.seq, 200)
                expect += 1
        assert expect == last + 1


def test_a_filtered_message_does_not_end_the_wait(name: str) -> None:
    """Woken by a message of a topic it does not want, the reader waits on in C and returns
    with the next wanted one (read_batch's loop, moved into the call)."""
    with RingWriter.create(name, 1 << 16) as w, reader(name, True, topics=["want"]) as r:
        want, other = w.register_topic("want"), w.register_topic("other")
        r.poll()

        def write() -> None:
            time.sleep(0.05)
            w.write(1, other, b"no")
            time.sleep(0.05)
            w.write(1, want, b"yes")

        thread = threading.Thread(target=write)
        thread.start()
        events = r.read_batch(timeout=5.0)
        thread.join()
        assert [(e.topic, bytes(e.payload)) for e in events if isinstance(e, RingMessage)] == [
            ("want", b"yes")
        ]
        assert r.woke_ns > 0  # it waited, and says when it woke (CLOCK_REALTIME)
        assert r.poll() == [] and r.woke_ns == 0


@pytest.mark.parametrize("fused", [False, True])
def test_interrupt_and_timeout_end_a_blocked_read(name: str, fused: bool) -> None:
    with RingWriter.create(name, 1 << 16) as w, reader(name, fused) as r:
        timer = threading.Timer(0.1, r.interrupt)
        timer.start()
        t0 = time.monotonic()
        assert r.read_batch(timeout=None) == []
        assert time.monotonic() - t0 < 0.1 + PROMPT
        timer.join()
        t0 = time.monotonic()
        assert r.read_batch(timeout=0.05) == []
        assert time.monotonic() - t0 >= 0.045
        w.write(1, 0, b"after")
        assert [bytes(e.payload) for e in r.read_batch(timeout=1.0)] == [b"after"]


@pytest.mark.parametrize("fused", [False, True])
def test_closing_the_ring_ends_a_blocked_read(name: str, fused: bool) -> None:
    w = RingWriter.create(name, 1 << 16)
    with reader(name, fused) as r:
        timer = threading.Timer(0.1, w.close)
        timer.start()
        assert r.read_batch(timeout=10.0) == []
        assert r.closed
        timer.join()
