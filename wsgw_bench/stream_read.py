"""The /v1/stream SDK's read path alone: a kernel-TCP server on loopback sends envelope frames
(the C sink's exact shape, its send stamp as recv_ts_ns) at a paced rate to one consumer, and
the consumer's first line of code stamps each batch. No gateway, no DPDK: what is measured is
the consumer's read, socket readable -> events, against picows and a bare Python floor.

    python -m wsgw_bench.stream_read --rates 100,1000 --seconds 3 --rounds 2

Contenders (alternated round by round, each window a fresh server and consumer process):
  sdk          gateway.client Client.connect(url).read(timeout=0.05), as the feed bench
  sdk-python   the same with WSGW_STREAM_READ=python (the SDK's Python read path)
  picows       a picows client, orjson.loads per frame (the feed bench's envelope consumer)
  floor        poll + sock.recv + orjson.loads of one frame's body: the least a Python
               consumer does per wake-up (what a one-C-call read can at best approach)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import select
import socket
import statistics
import time
from multiprocessing.connection import Connection
from pathlib import Path

from dataplane.ws.handshake import accept_token

PAYLOAD = b'{"e":"trade","E":1700000000000,"s":"BTCUSDT","t":12345,"p":"42000.10","q":"0.001"}'


def _frame(body: bytes) -> bytes:
    n = len(body)
    head = bytes((0x81, n)) if n < 126 else bytes((0x81, 126)) + n.to_bytes(2, "big")
    return head + body


def _envelope(seq: int, ts: int) -> bytes:
    return (
        b'{"type":"msg","seq":%d,"session":1,"topic":"btcusdt@trade","recv_ts_ns":%d,'
        b'"payload":"%s"}' % (seq, ts, PAYLOAD.replace(b'"', b'\\"'))
    )


def server_main(conn: Connection, rate: int, seconds: float) -> None:
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    conn.send(lsock.getsockname()[1])
    sock, _ = lsock.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = b""
    while b"\r\n\r\n" not in request:
        request += sock.recv(4096)
    key = next(
        line.split(b":", 1)[1].strip()
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = accept_token(key)
    sock.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: "
        + accept
        + b"\r\n\r\n"
        + _frame(b'{"type":"subscribed","epoch":"1a","next_seq":1}')
    )
    conn.recv()  # the consumer is reading
    period = 1e9 / rate
    start = time.monotonic_ns() + 20_000_000
    end = start + int(seconds * 1e9)
    seq = 1
    while True:
        due = start + int((seq - 1) * period)
        if due >= end:
            break
        left = due - time.monotonic_ns()
        if left > 0:
            time.sleep(left / 1e9)
        sock.sendall(_frame(_envelope(seq, time.time_ns())))
        seq += 1
    time.sleep(0.1)
    sock.close()
    conn.send(seq - 1)


def _sdk(url: str, go: Connection, out: list[int], seconds: float) -> None:
    from gateway.client import Client, RingMessage

    with Client.connect(url) as client:
        go.send("go")
        read, clock = client.read, time.time_ns
        stop = time.monotonic() + seconds + 0.5
        while time.monotonic() < stop:
            events = read(timeout=0.05)
            now = clock()
            for event in events:
                if type(event) is RingMessage:
                    out.append(now - event.ts_ns)


def _floor(url: str, go: Connection, out: list[int], seconds: float) -> None:
    import orjson

    from gateway.client.stream import _open

    parts = __import__("urllib.parse").parse.urlsplit(url)
    sock, _ws, _early = _open(parts, None, 5.0)
    sock.setblocking(False)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    go.send("go")
    clock, loads = time.time_ns, orjson.loads
    stop = time.monotonic() + seconds + 0.5
    buf = b""
    while time.monotonic() < stop:
        if not poller.poll(50):
            continue
        try:
            data = sock.recv(1 << 18)
        except BlockingIOError:
            continue
        if not data:
            break
        now = clock()
        buf += data
        while len(buf) >= 2:  # (the bench's own frames: 7- or 16-bit lengths)
            n = buf[1] & 0x7F
            head = 2
            if n == 126:
                n, head = int.from_bytes(buf[2:4], "big"), 4
            if len(buf) < head + n:
                break
            body = loads(buf[head : head + n])
            buf = buf[head + n :]
            if body.get("type") == "msg":
                out.append(now - body["recv_ts_ns"])


def _picows(url: str, go: Connection, out: list[int], seconds: float) -> None:
    import asyncio

    import orjson
    import picows

    clock = time.time_ns

    class Listener(picows.WSListener):
        def on_ws_frame(self, transport: object, frame: picows.WSFrame) -> None:
            now = clock()
            if frame.msg_type == picows.WSMsgType.TEXT:
                body = orjson.loads(frame.get_payload_as_bytes())
                if body.get("type") == "msg":
                    body["payload"].encode()
                    out.append(now - body["recv_ts_ns"])

    async def run() -> None:
        transport, _ = await picows.ws_connect(Listener, url)
        go.send("go")
        await asyncio.sleep(seconds + 0.5)
        transport.disconnect()

    asyncio.run(run())


CONTENDERS = {"sdk": _sdk, "sdk-python": _sdk, "picows": _picows, "floor": _floor}


def consumer_main(name: str, url: str, go: Connection, result: Connection, seconds: float) -> None:
    if name == "sdk-python":
        os.environ["WSGW_STREAM_READ"] = "python"
    out: list[int] = []
    CONTENDERS[name](url, go, out, seconds)
    result.send(out)


def window(name: str, rate: int, seconds: float) -> tuple[float, float, int, int]:
    ctx = mp.get_context("spawn")
    srv_a, srv_b = ctx.Pipe()
    res_a, res_b = ctx.Pipe()
    server = ctx.Process(target=server_main, args=(srv_b, rate, seconds))
    server.start()
    port = srv_a.recv()
    url = f"ws://127.0.0.1:{port}/v1/stream"
    consumer = ctx.Process(target=consumer_main, args=(name, url, srv_a, res_b, seconds))
    consumer.start()
    lat = res_a.recv()
    sent_n = srv_a.recv() if srv_a.poll(5) else -1
    consumer.join(10)
    server.join(10)
    for proc in (consumer, server):
        if proc.is_alive():
            proc.kill()
            proc.join()
    lat_us = sorted(x / 1000 for x in lat)
    if not lat_us:
        return float("nan"), float("nan"), 0, sent_n
    p99 = lat_us[min(len(lat_us) - 1, int(len(lat_us) * 0.99))]
    return statistics.median(lat_us), p99, len(lat_us), sent_n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,1000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--contenders", default="sdk,sdk-python,picows,floor")
    args = parser.parse_args()
    names = args.contenders.split(",")
    rates = [int(r) for r in args.rates.split(",")]
    results: dict[tuple[str, int], list[float]] = {}
    for round_ in range(args.rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        for rate in rates:
            for name in order:
                load = Path("/proc/loadavg").read_text().split()[0]
                p50, p99, n, sent = window(name, rate, args.seconds)
                results.setdefault((name, rate), []).append(p50)
                print(
                    f"round {round_} {rate:>6} msg/s {name:<11} p50 {p50:7.1f} us "
                    f"p99 {p99:7.1f} us  got {n}/{sent}  load {load}",
                    flush=True,
                )
    print("p50 us, median of rounds:")
    for rate in rates:
        print(
            f"{rate:>6} msg/s  "
            + "  ".join(f"{n} {statistics.median(results[(n, rate)]):.0f}" for n in names)
        )


if __name__ == "__main__":
    main()
