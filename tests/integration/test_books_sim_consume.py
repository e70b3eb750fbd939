"""`wsgw consume --normalized` decodes normalized events (JSON and binary subscriptions of
the same upstream topic) and prints each as JSON; a plain `-t TOPIC` reads both encodings.
Over a gateway's /v1/stream too (`--url`), with the simulator feeding the gateway."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dataplane.ring import RingWriter, ring_name
from gateway.normalize import BookReset
from gateway.normalize.schema import encode
from tests.integration.test_books_sim import VENUES, free_port, start_gateway, start_sim, until
from tests.utils.consumers import write_until_exit

TOPIC = "book:BTC/USD"


def test_consume_normalized_prints_decoded_events_of_either_encoding() -> None:
    gateway = f"clinorm{os.getpid()}"
    writer = RingWriter.create(ring_name(gateway, "messages"), 1 << 16)
    try:
        as_json = writer.register_topic(f"3:norm:{TOPIC}")
        as_binary = writer.register_topic(f"3:normbin:{TOPIC}")
        raw = writer.register_topic(f"3:{TOPIC}")
        command = [sys.executable, "-m", "gateway.cli", "consume", "--gateway", gateway,
                   "--session", "3", "-t", TOPIC, "--normalized", "--count", "4",
                   "--timeout", "20"]  # fmt: skip
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def write(i: int) -> None:
            reset = BookReset("kraken", "BTC/USD", "checksum", i)
            encoding, topic = ("json", as_json) if i % 2 == 0 else ("binary", as_binary)
            writer.write(3, topic, encode(reset, encoding))
            writer.write(3, raw, b'{"channel":"book"}')  # not asked for

        out, err = write_until_exit(proc, write)
    finally:
        writer.close()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 4, lines
    topics = [line.split(" ", 2)[1] for line in lines]
    events = [json.loads(line.split(" ", 2)[2]) for line in lines]
    assert {t.split(":", 1)[1].split(":", 1)[0] for t in topics} == {"norm", "normbin"}
    assert all(e["type"] == "reset" and e["reason"] == "checksum" for e in events), events
    stamps = [e["recv_ns"] for e in events]
    assert stamps == list(range(stamps[0], stamps[0] + 4))  # in order, both encodings


def test_consume_normalized_decodes_a_gateways_stream(tmp_path: Path) -> None:
    """`--url ws://.../v1/stream?subscription=N --normalized`: the gateway's normalized book
    events of the simulator's Kraken feed, decoded (a binary subscription) and printed."""
    sim = start_sim(None, free_port())
    try:
        gw, stop = start_gateway(tmp_path, sim)
        try:
            kraken = VENUES["kraken"]
            sim.emit(kraken, 20)
            control = gw.control
            sid = control.sessions.create(
                {"name": "kr", "url": sim.url(kraken), "dialect": "kraken", "transport": "kernel"}
            ).id
            sub = control.subscriptions.create(
                {"session_id": sid, "topics": [kraken.topic], "consumer": "cli",
                 "format": "normalized", "encoding": "binary"}
            ).subscription  # fmt: skip
            control.sessions.start(sid)
            until(lambda: sim.subscribers(kraken) > 0, "the subscription")
            url = f"{gw.server.ws_url}/v1/stream?subscription={sub.id}"
            command = [sys.executable, "-m", "gateway.cli", "consume", "--url", url,
                       "--normalized", "--count", "3", "--timeout", "20"]  # fmt: skip
            proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                sim.emit(kraken, 1)
                time.sleep(0.05)
            out, err = proc.communicate(timeout=30)
        finally:
            stop()
    finally:
        sim.close()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 3, (lines, err)
    for line in lines:
        _, topic, payload = line.split(" ", 2)
        assert topic.endswith(f"normbin:{kraken.topic}"), line
        event = json.loads(payload)  # binary on the wire, JSON on the screen
        assert event["type"] in ("snapshot", "delta") and event["symbol"] == "BTC/USD", event
