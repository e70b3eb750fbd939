"""Topic table and filtering: ids, names, shell patterns, topics registered after attach."""

from __future__ import annotations

import pytest

from dataplane.ring import Gap, RingMessage, RingReader, RingWriter, TopicError


def seqs_topics(events: list[RingMessage | Gap]) -> list[tuple[int, str]]:
    return [(e.seq, e.topic) for e in events if isinstance(e, RingMessage)]


def test_register_is_idempotent_and_visible_to_readers(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w:
        a = w.register_topic("binance:btcusdt@trade")
        b = w.register_topic("kraken:XBT/USD")
        assert (a, b) == (1, 2)
        assert w.register_topic("binance:btcusdt@trade") == 1
        assert w.topics == {"binance:btcusdt@trade": 1, "kraken:XBT/USD": 2}
        with RingReader.attach(name) as r:
            assert r.topics == {1: "binance:btcusdt@trade", 2: "kraken:XBT/USD"}
            c = w.register_topic("later")
            w.write_batch([(1, a, b"1"), (1, c, b"2"), (1, 0, b"3")])
            assert seqs_topics(r.poll()) == [(1, "binance:btcusdt@trade"), (2, "later"), (3, "")]
            assert r.topics[3] == "later"
    # a second writer process would see the table too: a fresh reader of a closed ring
    # is not possible here (unlinked), so check the name rules instead


def test_topic_name_rules_and_full_table(name: str) -> None:
    with RingWriter.create(name, 1 << 16, max_topics=4) as w:
        with pytest.raises(TopicError, match=r"1\.\.56 bytes"):
            w.register_topic("")
        with pytest.raises(TopicError, match=r"1\.\.56 bytes"):
            w.register_topic("x" * 57)
        assert w.register_topic("x" * 56) == 1
        assert w.register_topic("é") == 2  # UTF-8, two bytes
        assert w.register_topic("three") == 3
        with pytest.raises(TopicError, match="full"):
            w.register_topic("four")
        with pytest.raises(TopicError, match="topic id"):
            w.write(1, 4, b"x")
        with RingReader.attach(name) as r:
            assert r.topics == {1: "x" * 56, 2: "é", 3: "three"}


def test_filter_by_names_and_patterns(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w:
        ids = {t: w.register_topic(t) for t in ("bn:btc", "bn:eth", "kr:btc", "kr:eth")}
        with (
            RingReader.attach(name, topics=["bn:*"]) as bn,
            RingReader.attach(name, topics=["kr:btc", "*:eth"]) as mixed,
            RingReader.attach(name, topics=[]) as nothing,
            RingReader.attach(name) as everything,
        ):
            w.write_batch([(1, ids[t], t.encode()) for t in ids] + [(1, 0, b"none")])
            assert seqs_topics(bn.poll()) == [(1, "bn:btc"), (2, "bn:eth")]
            assert seqs_topics(mixed.poll()) == [(2, "bn:eth"), (3, "kr:btc"), (4, "kr:eth")]
            assert nothing.poll() == []
            assert len(everything.poll()) == 5
            # filtered messages are skipped, not lost
            assert bn.stats()["filtered"] == 3 and bn.stats()["lost"] == 0
            assert bn.next_seq == everything.next_seq == 6
            bn.set_topics(["kr:*"])
            w.write_batch([(1, ids["bn:btc"], b"x"), (1, ids["kr:eth"], b"y")])
            assert seqs_topics(bn.poll()) == [(7, "kr:eth")]
            bn.set_topics(None)
            w.write(1, ids["bn:btc"], b"z")
            assert seqs_topics(bn.poll()) == [(8, "bn:btc")]


def test_topics_registered_after_attach_are_never_missed(name: str) -> None:
    """The C filter knows the topics of its time; newer ids pass to Python, which matches
    their names: a message of a topic registered between two reads is delivered."""
    with (
        RingWriter.create(name, 1 << 16) as w,
        RingReader.attach(name, topics=["new:*"], copy=True) as r,
        RingReader.attach(name, topics=["old"]) as old,
    ):
        w.register_topic("old")
        delivered: list[RingMessage] = []
        for i in range(20):
            tid = w.register_topic(f"new:{i}")
            other = w.register_topic(f"other:{i}")
            w.write_batch([(1, tid, b"%d" % i), (1, other, b"no")])
            if i % 3 == 0:
                delivered += [m for m in r.poll() if isinstance(m, RingMessage)]
        delivered += [m for m in r.poll() if isinstance(m, RingMessage)]
        assert [m.topic for m in delivered] == [f"new:{i}" for i in range(20)]
        assert [bytes(m.payload) for m in delivered] == [b"%d" % i for i in range(20)]
        assert old.poll() == []
        assert r.next_seq == 41


def test_a_lapped_filtered_reader_counts_every_topic(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as w, RingReader.attach(name, topics=["a"]) as r:
        a = w.register_topic("a")
        b = w.register_topic("b")
        w.write(1, a, b"first")
        assert seqs_topics(r.poll()) == [(1, "a")]
        for i in range(200):
            w.write(1, a if i % 2 else b, bytes(64))
        events = r.poll()
        gap = events[0]
        assert isinstance(gap, Gap)
        oldest = w.info().oldest_seq
        assert gap.first_seq == 2 and gap.lost == oldest - 2  # all topics, exact
        assert all(isinstance(m, RingMessage) and m.topic == "a" for m in events[1:])
