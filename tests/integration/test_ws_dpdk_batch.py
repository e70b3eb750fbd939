"""Batch receive over the user-space stack on a real DPDK port: the C flood peer
(wsgw_bench/peer/wspeer.c) in the lab namespace sends sequence-numbered binary messages, the
DPDK transport hands them out as MessageBatches (`recv_frames`), every sequence number is
checked in C, and the per-message API on the same connection type still works."""

from __future__ import annotations

import asyncio

import pytest

from dataplane.engine import Engine
from dataplane.shim import WsSeqCheck
from dataplane.transports.dpdk import connect_dpdk
from dataplane.ws.errors import ConnectionClosedOK
from gateway.lab import Lab
from tests.conftest import requires_dpdk
from wsgw_bench.peers import WsPeer

pytestmark = [requires_dpdk, pytest.mark.dpdk]
COUNT = 50_000


@pytest.fixture
def engine(lab_engine) -> tuple[Engine, Lab]:  # type: ignore[no-untyped-def]
    return lab_engine(time_wait=0.5, recv_buffer=4 << 20)  # type: ignore[no-any-return]


@pytest.mark.parametrize("size", [100, 1024])
def test_flood_in_batches_every_sequence_number_checked(
    engine: tuple[Engine, Lab], size: int
) -> None:
    eng, lab = engine
    peer = WsPeer.start(lab)

    async def run() -> tuple[WsSeqCheck, list[int]]:
        check = WsSeqCheck(size)
        sizes: list[int] = []
        url = f"ws://{lab.peer_ip}:{peer.port}/flood/{COUNT}/{size}/binary"
        async with asyncio.timeout(60):
            ws = await connect_dpdk(url, engine=eng, deflate=False)
            try:
                while True:
                    try:
                        batch = await ws.recv_frames()
                    except ConnectionClosedOK:
                        break
                    assert set(batch.opcodes) == {2}
                    sizes.append(len(batch))
                    check.check(batch.data, batch.spans, len(batch))
            finally:
                await ws.close()
        return check, sizes

    try:
        check, sizes = asyncio.run(run())
    finally:
        peer.stop()
    assert sum(sizes) == COUNT
    assert (check.next_seq, check.gaps, check.duplicates, check.bad_length) == (COUNT, 0, 0, 0)
    assert max(sizes) > 1  # runs of frames came out as one batch


def test_per_message_recv_over_the_batch_path(engine: tuple[Engine, Lab]) -> None:
    eng, lab = engine
    peer = WsPeer.start(lab)

    async def run() -> list[int]:
        seqs: list[int] = []
        url = f"ws://{lab.peer_ip}:{peer.port}/flood/5000/100/binary"
        async with asyncio.timeout(60):
            ws = await connect_dpdk(url, engine=eng, deflate=False)
            try:
                async for message in ws:
                    assert len(message.data) == 100 and not message.text
                    seqs.append(int.from_bytes(message.data[:8], "big"))
            finally:
                await ws.close()
        return seqs

    try:
        assert asyncio.run(run()) == list(range(5000))
    finally:
        peer.stop()
