"""ArpCache on its own: learning, expiry, retries, give-up, the bounded waiting queue."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from dataplane.errors import DataplaneError
from dataplane.stack.arp_cache import ArpCache, ArpConfig, HostUnreachableError
from dataplane.stack.tcp_errors import TcpError
from dataplane.wire.addr import ip_to_int

HOST = ip_to_int("198.18.0.2")
GATEWAY = ip_to_int("198.18.0.254")
MAC = bytes.fromhex("020000000002")


def test_learn_then_lookup_until_expiry() -> None:
    cache = ArpCache(ArpConfig(reachable_time=30.0, refresh_margin=0.0))
    assert cache.lookup(HOST, 0.0) is None
    cache.learn(HOST, MAC, 1.0)
    assert cache.lookup(HOST, 30.9) == MAC
    assert cache.lookup(HOST, 31.0) is None
    assert cache.stats.expired == 1


def test_merge_only_does_not_create() -> None:
    cache = ArpCache()
    cache.learn(HOST, MAC, 0.0, create=False)
    assert cache.lookup(HOST, 0.0) is None
    cache.learn(HOST, MAC, 0.0)
    other = bytes.fromhex("020000000099")
    cache.learn(HOST, other, 1.0, create=False)
    assert cache.lookup(HOST, 1.0) == other


def test_entry_in_use_is_refreshed_before_expiry() -> None:
    cache = ArpCache(ArpConfig(reachable_time=60.0, refresh_margin=5.0))
    cache.learn(HOST, MAC, 0.0)
    assert cache.lookup(HOST, 54.0) == MAC
    assert cache.poll(54.0).requests == []
    assert cache.lookup(HOST, 56.0) == MAC  # still usable while the refresh is out
    assert cache.poll(56.0).requests == [HOST]
    assert cache.poll(57.0).requests == []
    cache.learn(HOST, MAC, 57.0)
    assert cache.lookup(HOST, 100.0) == MAC


def test_retries_then_failure_with_clear_error() -> None:
    cache = ArpCache(ArpConfig(retry_interval=1.0, max_requests=3))
    cache.enqueue(GATEWAY, b"packet-1", 0.0)
    cache.enqueue(GATEWAY, b"packet-2", 0.2)
    assert cache.poll_at() == 0.0
    assert cache.poll(0.0).requests == [GATEWAY]
    assert cache.poll(0.5).requests == []
    assert cache.poll_at() == 1.0
    assert cache.poll(1.0).requests == [GATEWAY]
    assert cache.poll(2.0).requests == [GATEWAY]
    result = cache.poll(3.0)
    assert result.requests == []
    [failure] = result.failures
    assert (failure.ip, failure.requests_sent, failure.dropped_packets) == (GATEWAY, 3, 2)
    assert cache.stats.requests_sent == 3
    assert cache.stats.failed_dropped == 2
    assert not cache.is_pending(GATEWAY)
    assert cache.poll_at() is None
    error = failure.error(ip_to_int("203.0.113.7"))
    assert isinstance(error, HostUnreachableError)
    assert isinstance(error, TcpError)
    assert isinstance(error, DataplaneError)
    assert error.errno == errno.EHOSTUNREACH
    assert str(error) == (
        "host 203.0.113.7 unreachable via gateway 198.18.0.254: "
        "no ARP reply for 198.18.0.254 after 3 requests"
    )
    assert error.arp_requests == 3


def test_reply_releases_waiting_packets_in_order() -> None:
    cache = ArpCache()
    cache.enqueue(HOST, b"a", 0.0)
    cache.enqueue(HOST, b"b", 0.0)
    cache.poll(0.0)
    assert cache.learn(HOST, MAC, 0.1) == [b"a", b"b"]
    assert cache.stats.resolved == 1
    assert cache.poll(5.0).failures == []


def test_waiting_queue_is_bounded_drop_oldest() -> None:
    cache = ArpCache(ArpConfig(queue_limit=4))
    for i in range(10):
        cache.enqueue(HOST, bytes([i]), 0.0)
    assert cache.waiting(HOST) == 4
    assert cache.stats.queue_dropped == 6
    assert cache.learn(HOST, MAC, 0.0) == [bytes([6]), bytes([7]), bytes([8]), bytes([9])]


def test_cache_size_is_bounded() -> None:
    cache = ArpCache(ArpConfig(max_entries=2))
    cache.learn(1, MAC, 0.0)
    cache.learn(2, MAC, 1.0)
    cache.learn(3, MAC, 2.0)
    assert len(cache) == 2
    assert 1 not in cache
    assert cache.stats.evicted == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"reachable_time": 0}, {"max_requests": 0}, {"queue_limit": 0}, {"refresh_margin": 61}],
)
def test_bad_config_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ArpConfig(**kwargs)


def test_static_entry_never_expires_nor_changes() -> None:
    cache = ArpCache(ArpConfig(reachable_time=1.0, refresh_margin=0.5))
    cache.enqueue(HOST, b"waiting", 0.0)
    assert cache.add_static(HOST, MAC) == [b"waiting"]
    cache.learn(HOST, bytes.fromhex("020000000099"), 1.0)
    assert cache.lookup(HOST, 1e9) == MAC
    assert cache.poll(1e9).requests == []
