"""Liveness on a fake clock: pings, keepalives, ping timeout, dead feed."""

from __future__ import annotations

import pytest

from gateway.sessions import Due, HeartbeatConfig, Liveness

HB = HeartbeatConfig(ping_interval_s=10.0, ping_timeout_s=5.0, dead_feed_timeout_s=30.0)


def test_pings_on_schedule_one_at_a_time() -> None:
    live = Liveness(HB, None, now=0.0)
    assert live.due(9.9) == []
    assert live.next_deadline(0.0) == 10.0
    assert live.due(10.0) == [Due.PING]
    live.on_ping_sent(10.0)
    assert live.due(25.0) == []  # never a second ping while one is unanswered
    live.on_pong(10.5, 0.5)
    assert live.last_rtt == 0.5
    assert live.due(19.9) == []
    assert live.due(20.0) == [Due.PING]


def test_ping_timeout_needs_silence_too() -> None:
    live = Liveness(HB, None, now=0.0)
    live.on_ping_sent(10.0)
    assert live.dead(14.9) is None
    live.on_message(14.0)  # data after the ping: the pong may be queued behind a burst
    assert live.dead(18.9) is None
    assert live.next_deadline(18.9) == pytest.approx(19.0)
    dead = live.dead(19.0)
    assert dead is not None
    assert dead.reason.startswith("ping timeout")
    assert dead.code == 1011


def test_dead_feed_only_while_subscribed() -> None:
    hb = HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=30.0)
    live = Liveness(hb, None, now=0.0)
    assert live.dead(1000.0) is None  # nothing subscribed: silence is expected
    live.expect_data(1000.0)
    assert live.dead(1029.0) is None
    live.on_message(1020.0)
    assert live.dead(1049.0) is None
    dead = live.dead(1050.0)
    assert dead is not None
    assert dead.reason.startswith("no data")
    live.expect_data(1050.0, False)  # last topic unsubscribed
    assert live.dead(5000.0) is None


def test_pongs_do_not_keep_a_dead_feed_alive() -> None:
    hb = HeartbeatConfig(ping_interval_s=1.0, ping_timeout_s=5.0, dead_feed_timeout_s=3.0)
    live = Liveness(hb, None, now=0.0)
    live.expect_data(0.0)
    for t in (1.0, 2.0):
        live.on_ping_sent(t)
        live.on_pong(t + 0.01, 0.01)
    dead = live.dead(3.0)
    assert dead is not None
    assert "no data" in dead.reason


def test_keepalive_schedule() -> None:
    live = Liveness(HeartbeatConfig(ping_interval_s=None), 25.0, now=0.0)
    assert live.next_deadline(0.0) == 25.0
    assert live.due(25.0) == [Due.KEEPALIVE]
    live.on_keepalive_sent(25.0)
    assert live.due(49.0) == []
    assert live.next_deadline(49.0) == 50.0


def test_nothing_scheduled_means_no_deadline() -> None:
    hb = HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=None)
    assert Liveness(hb, None, 0.0).next_deadline(0.0) == float("inf")
