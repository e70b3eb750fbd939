"""The control-plane set-up the feed-group tests share (test_groups_kernel, test_groups_mixed):
leg sessions, their group, each leg subscribed and started, a ring reader of the group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dataplane.ring import RingReader, RingWriter
from gateway.control import ControlPlane
from gateway.groups.feed import group_hub_id
from gateway.hub.names import ring_topics


def create_group(
    control: ControlPlane,
    legs: Mapping[str, Mapping[str, Any]],
    topic: str,
    **group: Any,
) -> tuple[int, dict[str, int]]:
    """Per leg name its session's values (url, dialect, transport, ...: named `leg<name>`),
    then the group of those sessions (`group`: its other values, a name at least), each leg
    subscribed to `topic` and started: (the group's id, leg name -> session id)."""
    ids = {
        name: control.sessions.create({"name": f"leg{name}", **values}).id
        for name, values in legs.items()
    }
    group_id = control.groups.create({**group, "legs": list(ids.values())}).id
    for sid in ids.values():
        control.subscriptions.create({"session_id": sid, "topics": [topic], "consumer": "c"})
        control.sessions.start(sid)
    return group_id, ids


def group_reader(ring: RingWriter, group_id: int, start: str = "latest") -> RingReader:
    """A ring reader of the group's records (its topics and gap records)."""
    return RingReader.attach_fd(
        ring.fd, topics=ring_topics(group_hub_id(group_id), None), copy=True, start=start
    )
