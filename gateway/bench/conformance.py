"""`conformance`: the Autobahn client cases (kosoku's fuzzingserver) on both transports,
summarised as verdict counts. Not a speed: a scenario so `make bench` prints it with the
figures. Quick mode runs cases 1.* and 2.* only."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

from gateway.bench.core import BenchOptions, Measurement, scenario

CASES = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*", "12.*", "13.*"]
QUICK = ["1.*", "2.*"]
SLOW = [f"{major}.*.{minor}" for major in (12, 13) for minor in range(6, 19)]
LIMIT = 32 * 1024 * 1024
SERVER = """
import asyncio, json, sys, kosoku
cases, exclude, host = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
async def main():
    async with kosoku.run_fuzzingserver(cases, exclude or None, host=host, port=9001) as s:
        print("ready", flush=True)
        try:
            results = list(await asyncio.wait_for(s.get_result(), 1200))
        except kosoku.FailureError as failure:
            results = list(failure.results)
        print(json.dumps([[r.case_id, r.behavior.value, r.behavior_close.value, r.passed,
                           str(r.result), str(r.result_close)] for r in results]), flush=True)
asyncio.run(main())
"""


async def _client(base: str, connect: Any) -> None:
    from dataplane.ws.errors import ConnectionClosed, HandshakeError

    async with connect(f"{base}/getCaseCount") as ws:
        count = int((await ws.recv()).data)
    for index in range(1, count + 1):
        try:
            async with connect(
                f"{base}/runCase?case={index}&agent=wsgw",
                max_message_size=LIMIT,
                max_frame_size=LIMIT,
                close_timeout=3.0,
            ) as ws:
                async for message in ws:
                    await ws.send(message.data, text=message.text)
        except (ConnectionClosed, HandshakeError):
            pass
    async with connect(f"{base}/updateReports?agent=wsgw"):
        pass


def run_suite(
    lab: Any, cases: list[str], exclude: list[str], host: str, connect: Any
) -> list[list[Any]]:
    """The fuzzingserver (in the lab's peer namespace, or here) and our client through
    `connect`; one row per case: [case_id, behavior, behavior_close, passed, result,
    result_close]."""
    popen = lab.popen if lab is not None else subprocess.Popen
    server = popen(
        [sys.executable, "-c", SERVER, json.dumps(cases), json.dumps(exclude), host],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the fuzzingserver did not start")
        asyncio.run(_client(f"ws://{host}:9001", connect))
        results: list[list[Any]] = json.loads(server.stdout.readline())
        return results
    finally:
        server.kill()
        server.wait()


def _measure(name: str, results: list[list[Any]]) -> list[Measurement]:
    verdicts = Counter(str(r[1]) for r in results)
    failed = sum(1 for r in results if not r[3])
    note = ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
    return [
        Measurement(
            "conformance",
            "Autobahn cases run",
            name,
            "cases",
            True,
            samples=[float(len(results))],
            note=note,
        ),
        Measurement(
            "conformance", "Autobahn cases failed", name, "cases", False, samples=[float(failed)]
        ),
    ]


@scenario("conformance", "Autobahn client cases 1-7, 9, 10, 12, 13 on both transports")
def conformance(options: BenchOptions) -> list[Measurement]:
    try:
        import kosoku  # noqa: F401
    except ImportError:
        return [
            Measurement(
                "conformance",
                "Autobahn cases run",
                "wsgw",
                "cases",
                True,
                note="skipped: kosoku is not installed",
            )
        ]
    from dataplane.transports.kernel import connect_kernel

    cases = QUICK if options.quick else CASES
    exclude = [] if options.quick else SLOW
    out = _measure(
        "wsgw kernel transport", run_suite(None, cases, exclude, "127.0.0.1", connect_kernel)
    )
    if os.geteuid() != 0:
        return out
    from dataplane.dpdk import Eal, EalConfig
    from dataplane.engine import Engine, EngineConfig
    from dataplane.stack.tcp import TcpConfig
    from dataplane.transports.dpdk import connect_dpdk
    from gateway.lab import Lab

    lab = Lab(options.lab_name)
    lab.down()
    lab.up()
    try:
        eal = Eal.init(EalConfig())
        with eal.open_port(lab.vdev) as port:
            engine = Engine.on_port(
                port,
                lab.gw_ip,
                lab.netmask,
                tcp_config=TcpConfig(time_wait=0.2, recv_buffer=4 << 20, send_buffer=4 << 20),
                config=EngineConfig(),
            )
            engine.start()
            try:

                def connect(url: str, **kw: Any) -> Any:
                    return connect_dpdk(url, engine=engine, **kw)

                out += _measure(
                    "wsgw DPDK transport", run_suite(lab, cases, exclude, lab.peer_ip, connect)
                )
            finally:
                engine.close()
    finally:
        lab.down()
    return out
