"""book.c (the C order books) under AddressSanitizer and UBSan, on the simulator's streams
of every venue done in C, randomly mutated copies of each message, every prefix of some
and deep nesting: no invalid access, no undefined behaviour, no leak (tests/fuzz/
book_harness.c). The Python tests hold the results; this holds the memory."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from wsgw_bench.books import sim_stream

HERE = Path(__file__).resolve().parent
SHIM = HERE.parents[1] / "dataplane" / "shim"
#: Stream name -> enum wsgw_book_venue.
VENUES = {
    "binance": 1,
    "binance-futures": 1,
    "okx": 2,
    "bybit": 3,
    "kraken": 4,
    "coinbase": 5,
    "bitstamp": 6,
}
MUTATION_BYTES = b'"[]{},:0159.-eEZT\\ xun\x00\xff'


def mutate(raw: bytes, rng: random.Random) -> bytes:
    out = bytearray(raw)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(out)) if out else 0
        byte = rng.choice(MUTATION_BYTES)
        roll = rng.random()
        if roll < 0.4 and out:
            out[at] = byte
        elif roll < 0.7 and out:
            del out[at]
        else:
            out.insert(at, byte)
    return bytes(out)


def corpus(path: Path, messages: int, seed: int) -> int:
    rng = random.Random(seed)
    count = 0
    with path.open("wb") as out:

        def put(venue: int, raw: bytes) -> None:
            nonlocal count
            out.write(bytes([venue]) + struct.pack("<I", len(raw)) + raw)
            count += 1

        for name, venue in VENUES.items():
            _, updates = sim_stream(name, messages)
            for raw in updates:
                put(venue, raw)
                for _ in range(3):
                    put(venue, mutate(raw, rng))
                if rng.random() < 0.01:
                    for end in range(len(raw)):
                        put(venue, raw[:end])
            put(venue, b"[" * 100_000)
            put(venue, b'{"data":' + b"[" * 5000)
    return count


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_book_c_is_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    harness = tmp_path / "book_harness"
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-g",
            "-std=gnu11",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            f"-I{SHIM}",
            str(HERE / "book_harness.c"),
            str(SHIM / "book.c"),
            str(SHIM / "shim_core.c"),
            "-o",
            str(harness),
        ],
        check=True,
        timeout=120,
    )
    records = tmp_path / "corpus.bin"
    count = corpus(records, 3000, seed=21)
    done = subprocess.run(
        [str(harness), str(records)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen, applied = (int(word) for word in done.stdout.split()[::2][:2])
    assert seen == count
    assert applied > 3 * 3000 * 0.9  # the real messages apply (the futures stream too)
