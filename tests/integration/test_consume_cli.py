"""`wsgw consume` tails the local ring: messages of the chosen topics, then stops."""

from __future__ import annotations

import os
import subprocess
import sys

from dataplane.ring import RingWriter, ring_name
from tests.utils.consumers import write_until_exit


def test_consume_prints_the_chosen_topics_from_the_ring() -> None:
    gateway = f"cli{os.getpid()}"
    writer = RingWriter.create(ring_name(gateway, "messages"), 1 << 16)
    try:
        btc = writer.register_topic("3:btcusdt@trade")
        eth = writer.register_topic("3:ethusdt@trade")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "consume",
                "--gateway",
                gateway,
                "--session",
                "3",
                "-t",
                "btcusdt@trade",
                "--count",
                "3",
                "--timeout",
                "20",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = write_until_exit(
            proc, lambda i: writer.write(3, btc if i % 2 == 0 else eth, f'{{"n":{i}}}'.encode())
        )
    finally:
        writer.close()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 3
    assert all(" 3:btcusdt@trade " in line for line in lines)
    numbers = [int(line.rsplit(":", 1)[1].rstrip("}")) for line in lines]
    assert numbers == [numbers[0], numbers[0] + 2, numbers[0] + 4], lines  # in order, no eth
