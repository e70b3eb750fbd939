"""A stop that comes while a connection waits for a closing handshake the peer never
answers, over the kernel transport on loopback (the unit test of the same end runs on the
in-memory connection, the C feed's counts on DPDK in test_feed_path_dpdk): the
connection's end-of-life bookkeeping still runs, a feed group hears that the leg's input
is done, and the peer sees the socket closed."""

from __future__ import annotations

import asyncio

from wsproto.frame_protocol import FrameProtocol, Opcode

from gateway.sessions import HeartbeatConfig, UpstreamSession
from tests.integration.test_sessions_helpers import fast_config, run, until
from tests.integration.ws_upgrade import upgrade_response
from tests.utils.leg_sink import LegSink


class MutePeer:
    """Upgrades, then reads and never writes: no data, no answer to a close frame."""

    def __init__(self) -> None:
        self.opcodes: list[Opcode] = []
        self.eof = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await upgrade_response(reader))
        await writer.drain()
        frames = FrameProtocol(client=False, extensions=[])  # wsproto reads the client's frames
        try:
            while data := await reader.read(65536):
                frames.receive_bytes(data)
                self.opcodes.extend(frame.opcode for frame in frames.received_frames())
        except ConnectionError:
            pass
        finally:
            self.eof.set()
            writer.close()


def test_a_stop_during_an_unanswered_closing_handshake_closes_the_kernel_connection() -> None:
    async def scenario() -> None:
        peer = MutePeer()
        server = await asyncio.start_server(peer.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sink = LegSink()
        hb = HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=0.2)
        session = UpstreamSession(
            1,
            fast_config(f"ws://127.0.0.1:{port}/ws", "binance", heartbeat=hb, close_timeout_s=1.0),
            sink,
            topics=("btcusdt@trade",),
        )
        try:
            session.start()
            await until(lambda: Opcode.CLOSE in peer.opcodes)  # no data: declared dead
            await asyncio.sleep(0.05)  # its task now waits for the closing handshake
            assert len(sink.inputs) == 1 and sink.inputs[0] >= 0, sink.inputs
            await asyncio.wait_for(session.stop(), 10)
            assert sink.inputs[1:] == [-1]  # the group heard the leg's input is done
            assert session.connections()[0]["state"] == "stopped"
            await asyncio.wait_for(peer.eof.wait(), 5)  # the socket was closed
            assert session.counters.connects == 1
        finally:
            await session.stop()
            server.close()
            await server.wait_closed()

    run(scenario(), timeout=30)
