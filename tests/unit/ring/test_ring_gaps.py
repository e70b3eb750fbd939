"""Lapped readers: the exact number of messages lost, then the oldest ones still there, in
order; never a torn message. Deterministic (one process), with a model of the writer."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ring_helpers import RingModel, payload_for, shm_name

from dataplane.ring import Gap, RingEvent, RingMessage, RingReader, RingWriter


def write(w: RingWriter, model: RingModel, lengths: list[int]) -> None:
    first = model.write_batch(lengths)
    got = w.write_batch([(1, 0, payload_for(first + i, n)) for i, n in enumerate(lengths)])
    assert got == first


def check(events: list[RingEvent], expect_next: int, model: RingModel) -> int:
    """Events are: an optional gap to the model's oldest, then consecutive intact messages."""
    for event in events:
        if isinstance(event, Gap):
            assert event.first_seq == expect_next
            assert expect_next + event.lost == model.oldest_seq
            expect_next += event.lost
            continue
        assert event.seq == expect_next
        assert len(event.payload) == model.lengths[event.seq]
        assert bytes(event.payload) == payload_for(event.seq, len(event.payload))
        expect_next += 1
    return expect_next


def test_a_reader_that_stops_reading_gets_the_exact_loss(name: str) -> None:
    model = RingModel(1 << 12)
    with RingWriter.create(name, 1 << 12) as w, RingReader.attach(name) as r:
        write(w, model, [100] * 10)
        assert check(r.read_batch(max=4), 1, model) == 5
        write(w, model, [100] * 100)  # laps the reader many times over
        events = r.poll()
        assert isinstance(events[0], Gap)
        assert events[0].first_seq == 5
        assert events[0].lost == model.oldest_seq - 5
        assert events[0].last_seq == model.oldest_seq - 1
        assert check(events, 5, model) == 111
        # it continues in order, with no further gap
        write(w, model, [10, 20, 30])
        assert check(r.poll(), 111, model) == 114


def test_filling_the_ring_exactly_is_not_a_gap_one_more_is(name: str) -> None:
    cap = 1 << 12
    model = RingModel(cap)
    with RingWriter.create(name, cap) as w, RingReader.attach(name) as r:
        per = cap // RingModel.size(96)  # 32 records of 128 B fill it exactly
        for _ in range(per):
            write(w, model, [96])
        assert model.oldest_seq == 1
        events = r.poll()
        assert not any(isinstance(e, Gap) for e in events)
        assert len(events) == per
        r.seek("oldest")
        r2 = RingReader.attach(name, start="oldest")
        write(w, model, [96])
        assert model.oldest_seq == 2
        e1, e2 = r.poll(), r2.poll()
        assert e1[0] == Gap(lost=1, first_seq=1) == e2[0]
        assert check(e1, 1, model) == per + 2
        r2.close()


def test_gap_then_continue_over_many_wraps(name: str) -> None:
    cap = 1 << 13
    model = RingModel(cap)
    with RingWriter.create(name, cap) as w, RingReader.attach(name) as r:
        expect = 1
        for round_ in range(50):
            write(w, model, [(round_ * 37 + i * 11) % 900 for i in range(round_ % 7 + 1)])
            if round_ % 5 == 4:  # reads now and then, gets lapped in between
                expect = check(r.poll(), expect, model)
        expect = check(r.poll(), expect, model)
        assert expect == model.seq + 1
        stats = r.stats()
        assert stats["lost"] + stats["messages"] == model.seq


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    cap_exp=st.integers(12, 14),
    data=st.data(),
)
def test_fuzz_sizes_wraps_and_read_points(cap_exp: int, data: st.DataObject) -> None:
    """Random message sizes (0 .. capacity/4, and the maximum), random batch shapes and
    read points, so wraps, padding and laps land everywhere. Every read is checked against
    the model: gaps exact, messages in order and intact."""
    cap = 1 << cap_exp
    top = cap // 4
    sizes = st.one_of(st.integers(0, top), st.sampled_from([0, 1, 7, 8, 9, top, cap // 2 - 32]))
    ops = data.draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("w"), st.lists(sizes, min_size=1, max_size=12)),
                st.tuples(st.just("r"), st.integers(1, 40)),
            ),
            min_size=1,
            max_size=40,
        )
    )
    with shm_name("fuzz") as name:
        model = RingModel(cap)
        with (
            RingWriter.create(name, cap) as w,
            RingReader.attach(name, max_batch=64) as r,
            RingReader.attach(name, copy=True) as r_copy,
        ):
            expect = expect_copy = 1
            for op, arg in ops:
                if op == "w":
                    write(w, model, arg)  # type: ignore[arg-type]
                else:
                    expect = check(r.read_batch(max=arg), expect, model)  # type: ignore[arg-type]
            expect = check(r.poll(), expect, model)
            while expect <= model.seq:
                expect = check(r.poll(), expect, model)
            while expect_copy <= model.seq:
                expect_copy = check(r_copy.poll(), expect_copy, model)
            assert r.poll() == [] and r_copy.poll() == []
            assert w.info().oldest_seq == model.oldest_seq
            assert w.info().write_pos == model.pos


def test_message_sequence_type() -> None:
    m = RingMessage(1, 2, "t", 3, b"x", 4)
    assert m.seq == 1 and m.topic == "t" and m.topic_id == 4
    assert Gap(5, 10).last_seq == 14
