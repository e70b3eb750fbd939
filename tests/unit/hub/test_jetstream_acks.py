"""The acked JetStream publishing's settings: refused at start with the setting's name."""

from __future__ import annotations

import pytest

from gateway.hub.nats import JetStreamConfig


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"ack_window": -1}, "ack_window -1"),
        ({"ack_timeout_s": 0}, "ack_timeout_s 0"),
        ({"ack_timeout_s": 5, "retry_for_s": 1}, "retry_for_s 1: at least ack_timeout_s"),
    ],
)
def test_a_wrong_ack_setting_is_refused_with_its_name(
    settings: dict[str, float], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        JetStreamConfig(**settings)  # type: ignore[arg-type]  # floats for ints: the refusal


def test_acks_are_on_by_default_and_zero_turns_them_off() -> None:
    assert JetStreamConfig().ack_window > 0
    assert JetStreamConfig(ack_window=0).ack_window == 0
