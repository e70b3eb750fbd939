"""JetStream message ids and stream limits: what the sink sends as Nats-Msg-Id, and the
limits refused at start (settings and JetStreamConfig alike) with the setting's name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.dialects.identity import binance_identity, content_hash, identity_for
from gateway.hub.nats import JetStreamConfig, message_id
from gateway.settings import JetStreamSettings, Settings

TRADE = b'{"stream":"btcusdt@trade","data":{"e":"trade","s":"BTCUSDT","t":4242,"p":"1"}}'


def test_an_exchange_id_names_the_message_whoever_publishes_it() -> None:
    found = binance_identity(TRADE)
    assert message_id(3, found, "aa", 17) == "3:btcusdt@trade:4242"
    assert message_id(3, found, "bb", 99) == message_id(3, found, "aa", 17)  # another run
    assert message_id(4, found, "aa", 17) != message_id(3, found, "aa", 17)  # another session


def test_without_an_exchange_id_the_run_and_ring_sequence_name_it() -> None:
    hashed = identity_for("generic")(b'{"topic":"t","x":1}')
    assert getattr(hashed, "kind", None) == "hash"  # a hash would drop two equal updates
    assert message_id(3, hashed, "aa", 17) == "3@aa:17"
    assert message_id(3, None, "aa", 17) == "3@aa:17"
    assert message_id(3, None, "bb", 17) != message_id(3, None, "aa", 17)
    assert content_hash(b"x") == content_hash(b"x")


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"stream": "md.x"}, "stream 'md.x'"),
        ({"max_msgs": 0}, "max_msgs 0"),
        ({"max_bytes": -5}, "max_bytes -5"),
        ({"max_age_s": -1}, "max_age_s -1"),
        ({"replicas": 7}, "replicas 7: 1 to 5"),
        ({"duplicate_window_s": 0}, "duplicate_window_s 0"),
        ({"max_age_s": 60, "duplicate_window_s": 120}, "exceeds max_age_s 60"),
    ],
)
def test_bad_limits_are_refused_at_start_with_the_setting_named(
    limits: dict[str, object], words: str
) -> None:
    with pytest.raises(ValidationError, match="hub.nats.jetstream: .*" + words.replace(".", r"\.")):
        Settings(hub={"nats": {"jetstream": limits}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        JetStreamConfig(**limits)  # type: ignore[arg-type]


def test_the_limits_reach_the_sink_s_stream_config() -> None:
    from gateway.runtime.compose import jetstream_config

    fields = dict(  # the same names on both sides: each setting reaches its config field
        stream="MD",
        max_age_s=3600,
        max_bytes=1 << 30,
        max_msgs=10**6,
        storage="memory",
        duplicate_window_s=30,
        msg_ids=False,
    )
    given = JetStreamSettings(**fields)  # type: ignore[arg-type]
    assert jetstream_config(given) == JetStreamConfig(**fields)  # type: ignore[arg-type]
    assert jetstream_config(None) is None


def test_a_feed_group_s_hub_id_takes_the_group_s_dialect() -> None:
    """Legs of one group on several nodes publish under the group's hub id, with the
    exchange id of its dialect: one id per upstream message, whichever node sent it."""
    from gateway.dialects.identity import binance_identity
    from gateway.groups.feed import GroupSpec, group_hub_id
    from gateway.hub import Hub
    from gateway.runtime.compose import session_identity
    from gateway.runtime.live import LiveRuntime

    hub = Hub()
    runtime = LiveRuntime(hub, hub=hub)
    try:
        runtime.set_group(GroupSpec(3, "g", (7, 8), "binance"))
        assert session_identity(runtime, group_hub_id(3)) is binance_identity
        assert session_identity(runtime, group_hub_id(4)) is None  # not running here
        assert session_identity(runtime, 7) is None  # a session not started here
        assert session_identity(None, 7) is None
    finally:
        runtime.close()
        hub.close()
