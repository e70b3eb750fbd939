"""A session created through the API without a setting gets the same value as a session
built in code: the API schema, the stored row and the config types share one set of defaults."""

from __future__ import annotations

from typing import Any

import pytest

from api.schemas.sessions import SessionCreate
from gateway.runtime import SessionSpec
from gateway.store.models import Base

SPEC = SessionSpec(
    id=1, name="s", url="ws://127.0.0.1:9/", dialect="generic", transport="kernel", port_id=None
)

#: API field (= stored column) -> the value the config types give it by default.
CONFIG_DEFAULTS: dict[str, Any] = {
    "tls_verify": SPEC.tls.verify,
    "heartbeat_interval_s": SPEC.heartbeat.ping_interval_s,
    "heartbeat_timeout_s": SPEC.heartbeat.ping_timeout_s,
    "reconnect_initial_delay_s": SPEC.reconnect.initial_delay_s,
    "reconnect_max_delay_s": SPEC.reconnect.max_delay_s,
    "reconnect_multiplier": SPEC.reconnect.multiplier,
    "reconnect_jitter": SPEC.reconnect.jitter,
    "reconnect_max_attempts": SPEC.reconnect.max_attempts,
}


def test_one_heartbeat_timeout_for_pings_and_dead_feeds() -> None:
    """The stored heartbeat_timeout_s is both timeouts: by default they agree too."""
    assert SPEC.heartbeat.dead_feed_timeout_s == SPEC.heartbeat.ping_timeout_s


@pytest.mark.parametrize("name", sorted(CONFIG_DEFAULTS))
def test_api_store_and_config_defaults_agree(name: str) -> None:
    column = Base.metadata.tables["sessions"].c[name]
    stored = column.default.arg if column.default is not None else None
    api = SessionCreate.model_fields[name].default
    assert api == stored == CONFIG_DEFAULTS[name]
