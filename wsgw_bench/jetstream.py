"""`wsgw bench jetstream`: what JetStream message ids cost the NATS sink (issue #20).

A hub and its NATS sink publish N Binance trade frames into a memory stream of a
`nats-server -js` of our own; the time runs from the first publish until the stream holds
all N. Contenders, alternated round by round (core.alternate): no ids, ids from the run and
ring sequence (no identity parse), ids from the exchange's trade id (one msgspec parse per
frame in the sink's thread, and the server's duplicate check either way); the last one also
without JetStream's acks (`ack_window=0`: core NATS publishes), what acked publishing costs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from wsgw_bench.core import BenchOptions, Measurement, alternate, scenario

CONTENDERS = {  # (msg ids, exchange identity, Wsgw headers, acked)
    "no ids": (False, False, False, True),
    "Wsgw headers, no ids": (False, False, True, True),
    "ids: run+seq": (True, False, False, True),
    "ids: trade id": (True, True, False, True),
    "ids: trade id, no acks": (True, True, False, False),
}
BATCH = 100
MAX_BEHIND = 20_000  # messages the sink may be behind the hub (the private ring holds more)


def _frame(trade_id: int) -> bytes:
    return (
        b'{"stream":"btcusdt@trade","data":{"e":"trade","E":1700000000000,"s":"BTCUSDT",'
        b'"t":%d,"p":"42000.10","q":"0.00100","T":1700000000000,"m":true,"M":true}}' % trade_id
    )


def stream_sequences(url: str, stream: str) -> dict[int, list[int]]:
    """session id -> the simulator's `sim_seq` of each message the stream held when asked,
    in stream order (what a durable consumer from the start gets); `$gap` records left out.
    Messages stored meanwhile are not read (the publishers may still run)."""

    async def read() -> dict[int, list[int]]:
        import nats
        import orjson
        from nats.js.api import AckPolicy, ConsumerConfig

        nc = await nats.connect(url)
        got: dict[int, list[int]] = {}
        try:
            js = nc.jetstream()
            last = (await js.stream_info(stream)).state.last_seq
            config = ConsumerConfig(ack_policy=AckPolicy.NONE)
            sub = await js.pull_subscribe("", stream=stream, config=config)
            while last:
                try:
                    batch = await sub.fetch(1000, timeout=2.0)
                except nats.errors.TimeoutError:
                    return got
                for msg in batch:
                    parts = msg.subject.split(".")
                    body = orjson.loads(msg.data) if msg.data else None
                    if len(parts) > 1 and parts[1].isdigit() and isinstance(body, dict):
                        seq = body.get("sim_seq")
                        if isinstance(seq, int):
                            got.setdefault(int(parts[1]), []).append(seq)
                    if msg.metadata.sequence.stream >= last:
                        return got
            return got
        finally:
            await nc.close()

    return asyncio.run(read())


def _stored(url: str, stream: str) -> int:
    async def count() -> int:
        import nats

        nc = await nats.connect(url)
        try:
            info = await nc.jetstream().stream_info(stream)
            return int(info.state.messages)
        finally:
            await nc.close()

    return asyncio.run(count())


def _delete(url: str, stream: str) -> None:
    async def delete() -> None:
        import nats

        nc = await nats.connect(url)
        try:
            await nc.jetstream().delete_stream(stream)
        finally:
            await nc.close()

    asyncio.run(delete())


def publish_rate(
    url: str,
    stream: str,
    count: int,
    msg_ids: bool,
    identity: bool,
    headers: bool,
    acked: bool = True,
) -> float:
    """Messages per second from the hub's first publish until the stream holds them all."""
    from gateway.dialects.identity import binance_identity
    from gateway.hub import Hub
    from gateway.hub.nats import JetStreamConfig, NatsConfig, NatsSink

    config = NatsConfig(
        servers=[url],
        headers=headers,
        jetstream=JetStreamConfig(
            stream=stream, storage="memory", msg_ids=msg_ids, ack_window=4096 if acked else 0
        ),
        identity=(lambda sid: binance_identity) if identity else None,
    )
    sink = NatsSink(config).start(10)
    deadline = time.monotonic() + 10
    while not sink.stats.jetstream_ready:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no JetStream stream: {sink.stats.last_error}")
        time.sleep(0.01)
    hub = Hub(nats=sink)
    frames = [_frame(i) for i in range(1, count + 1)]
    try:
        started = time.perf_counter()
        for at in range(0, count, BATCH):
            hub.publish_batch([(1, "btcusdt@trade", f, 0, None) for f in frames[at : at + BATCH]])
            while sink.pending > MAX_BEHIND:  # the ring would lap the sink: the sink's pace
                time.sleep(0.0005)
        while sink.stats.published + sum(sink.dropped.values()) < count:
            time.sleep(0.002)
        while (stored := _stored(url, stream)) < count:
            if sum(sink.dropped.values()):
                raise RuntimeError(f"the sink dropped messages: {sink.dropped}")
            time.sleep(0.005)
        elapsed = time.perf_counter() - started
    finally:
        hub.close()
    if stored != count:
        raise RuntimeError(f"the stream holds {stored} of {count}")
    _delete(url, stream)
    return count / elapsed


@scenario("jetstream", "NATS sink into JetStream: publish msg/s with and without message ids")
def bench_jetstream(options: BenchOptions) -> list[Measurement]:
    from wsgw_bench.servers import NatsServer, nats_server_binary

    if nats_server_binary() is None:
        return []
    count = 20_000 if options.quick else 200_000
    results: dict[str, Measurement] = {
        name: Measurement(
            "jetstream",
            f"hub -> stream, {count} trades",
            name,
            "msg/s",
            True,
            reference=(name == "no ids"),
            note="memory stream; acked publishing (one ack per 32) unless 'no acks'",
        )
        for name in CONTENDERS
    }
    with NatsServer(jetstream=True) as server:
        for round_, name in alternate(options.repetitions, list(CONTENDERS)):
            msg_ids, identity, headers, acked = CONTENDERS[name]
            stream = f"BENCH{round_}{'ABCDE'[list(CONTENDERS).index(name)]}"
            results[name].samples.append(
                publish_rate(server.url, stream, count, msg_ids, identity, headers, acked)
            )
    return list(results.values())


def main(argv: Any = None) -> None:  # pragma: no cover (a manual run)
    import sys

    quick = "--quick" in (argv or sys.argv[1:])
    for m in bench_jetstream(BenchOptions(quick=quick, repetitions=5)):
        print(f"{m.contender:22s} median {m.median:10.0f} {m.unit}  samples {m.samples}")


if __name__ == "__main__":
    main()
