"""A feed group's last gap for /v1/stream consumers that subscribe after it, on both paths:
the Python group publishes it through the hub, the C group writes it into the ring itself
and the hub asks the group for it (Hub.gap_source). Either way a later consumer gets it
once, first, marked past; a consumer racing it gets it once; a changed or removed group's
last gap stays the hub's."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.groups.cgroup import CFeedGroup
from gateway.groups.feed import FeedGroup, GroupRouter, GroupSpec, group_hub_id
from gateway.hub import Delivery, GapNotice, Hub
from tests.unit.groups.test_feed_group import TOPIC, batch
from tests.unit.hub.conftest import settle

A, B = 11, 12
GROUP_ID = 4
HUB_ID = group_hub_id(GROUP_ID)
FAR = 2**62  # past every hole's deadline
REASON = f"lost on every leg: {TOPIC} after 2, before 4"


@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
def test_a_later_consumer_gets_the_groups_last_gap_as_past(c_path: bool) -> None:
    async def main() -> None:
        hub = Hub()
        router = GroupRouter(hub, c_path=c_path)
        spec = GroupSpec(GROUP_ID, "g", (A, B), "binance", 10_000)
        group = router.set_group(spec)
        assert isinstance(group, CFeedGroup if c_path else FeedGroup)
        try:
            early = hub.subscribe(HUB_ID)  # the loop's router follows the ring from here
            t0 = time.time_ns()
            router.publish_batch(batch(A, [1, 2, 4], t0))  # 3 on no leg: 4 waits
            router.publish_batch(batch(B, [1, 2, 4], t0 + 1))
            group.expire(FAR)  # the hole is a loss: a `$gap` record of the group
            racing = hub.subscribe(HUB_ID)  # before the router read the record
            await settle(hub)

            gaps = [e for e in early.poll() if isinstance(e, GapNotice)]
            assert [(g.session_id, g.lost, g.reason, g.past) for g in gaps] == [
                (HUB_ID, 1, REASON, False)
            ]
            seq = gaps[0].seq
            (notice, *rest) = racing.poll()
            assert isinstance(notice, GapNotice) and notice.past and notice.seq == seq
            assert not any(isinstance(e, GapNotice) for e in rest)

            late = hub.subscribe(HUB_ID)
            router.publish_batch(batch(A, [5], t0 + 2))
            await settle(hub)
            past, *after = late.poll()
            assert isinstance(past, GapNotice) and past.past
            assert (past.session_id, past.lost, past.reason, past.seq) == (HUB_ID, 1, REASON, seq)
            assert past.ts_ns is not None and t0 <= past.ts_ns <= time.time_ns()
            assert [type(e) for e in after] == [Delivery]

            router.set_group(spec)  # a new form: the hub keeps the old form's last gap
            router.remove_group(GROUP_ID)
            last = hub.last_gap(HUB_ID)
            assert last is not None and (last.seq, last.lost, last.reason) == (seq, 1, REASON)
        finally:
            router.remove_group(GROUP_ID)
            hub.close()

    asyncio.run(main())
