"""`topic`: topic extraction per message, the C batch scanner against parsing the JSON.

Contenders, on bursts of real-looking messages of each exchange:
- C batch (scan): one wsgw_topic_extract_batch call over a laid-out burst, the way the
  engine calls it on its receive buffer (the ctypes crossing is amortised over the burst);
- C batch (from list): the same plus laying out a Python list of bytes (join, offsets);
- orjson.loads + dict lookup, json.loads + dict lookup: what a parse per message costs;
- Python scanner: the pure-Python twin (the fallback), for scale.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import orjson

from wsgw_bench.core import BenchOptions, Measurement, alternate, scenario, time_per_op

BURST = 256
NOTE = (
    "CPU time (process_time): single-threaded kernels, so time-slicing on a busy host is left out"
)


#: name -> (message, key paths, dict lookup that finds the same topic)
SAMPLES: dict[str, tuple[bytes, tuple[str, ...], Callable[[Any], object]]] = {
    "binance trade": (
        b'{"stream":"btcusdt@trade","data":{"e":"trade","E":1700000000123,"s":"BTCUSDT",'
        b'"t":3245678901,"p":"37123.45000000","q":"0.01230000","T":1700000000122,"m":true,'
        b'"M":true}}',
        ("stream",),
        lambda o: o["stream"],
    ),
    "okx trade": (
        b'{"arg":{"channel":"trades","instId":"BTC-USDT"},"data":[{"instId":"BTC-USDT",'
        b'"tradeId":"130639474","px":"42219.9","sz":"0.12060306","side":"buy",'
        b'"ts":"1630048897897","count":"3"}]}',
        ("arg.channel", "arg.instId"),
        lambda o: (o["arg"]["channel"], o["arg"]["instId"]),
    ),
    "kraken book": (
        b'{"channel":"book","type":"update","data":[{"symbol":"BTC/USD","bids":[{"price":'
        b'42000.1,"qty":0.5}],"asks":[],"checksum":2439117997,"timestamp":'
        b'"2023-10-06T17:35:55.440295Z"}]}',
        ("channel", "data[0].symbol"),
        lambda o: (o["channel"], o["data"][0]["symbol"]),
    ),
    "bitstamp trade (topic last)": (
        b'{"data":{"id":307183929,"timestamp":"1700000000","amount":0.0125,"amount_str":'
        b'"0.01250000","price":37123,"price_str":"37123","type":0,"microtimestamp":'
        b'"1700000000123456","buy_order_id":1683456789012345,"sell_order_id":'
        b'1683456789012346},"channel":"live_trades_btcusd","event":"trade"}',
        ("channel", "event"),
        lambda o: (o["channel"], o["event"]),
    ),
}


@scenario("topic", "topic extraction ns/message: C batch scan vs orjson/json parse")
def bench_topic(options: BenchOptions) -> list[Measurement]:
    from dataplane.shim import TopicBatch, build_topic_spec
    from gateway.dialects.jsonscan import TopicPaths, scan

    min_seconds = 0.05 if options.quick else 0.3
    results: list[Measurement] = []
    for name, (message, path_texts, lookup) in SAMPLES.items():
        paths = TopicPaths.of(*path_texts)
        burst = [message] * BURST
        batch = TopicBatch(build_topic_spec(paths.paths), BURST)
        batch.load(burst)
        assert batch.scan() == BURST, name

        def c_scan(batch: TopicBatch = batch) -> object:
            return batch.scan()

        def c_list(batch: TopicBatch = batch, burst: list[bytes] = burst) -> object:
            return batch.run(burst)

        def with_orjson(burst: list[bytes] = burst, lookup: Any = lookup) -> object:
            return [lookup(orjson.loads(m)) for m in burst]

        def with_json(burst: list[bytes] = burst, lookup: Any = lookup) -> object:
            return [lookup(json.loads(m)) for m in burst]

        def python_scan(burst: list[bytes] = burst, paths: TopicPaths = paths) -> object:
            return [scan(m, paths) for m in burst[:16]]

        contenders: dict[str, tuple[Callable[[], object], int]] = {
            "C batch (scan)": (c_scan, BURST),
            "C batch (from list)": (c_list, BURST),
            "orjson.loads + lookup": (with_orjson, BURST),
            "json.loads + lookup": (with_json, BURST),
            "Python scanner": (python_scan, 16),
        }
        per = {
            label: Measurement(
                "topic",
                f"{name} ({len(message)} B)",
                label,
                "ns/msg",
                False,
                reference=(label == "orjson.loads + lookup"),
                note=NOTE if not results and label == "C batch (scan)" else "",
            )
            for label in contenders
        }
        for _, label in alternate(options.repetitions, list(contenders)):
            func, count = contenders[label]
            cpu_per_call = time_per_op(func, min_seconds, time.process_time)
            per[label].samples.append(cpu_per_call * 1e9 / count)
        results += per.values()
    return results
