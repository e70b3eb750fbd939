"""`conformance`: every Autobahn client case (kosoku's fuzzingserver, the Autobahn case files
on Python 3) against our client, on the kernel transport and on the DPDK transport (our own
TCP/IP stack on a lab), graded verdict by verdict. Not a speed: a scenario so that
`make bench` prints it with the figures. Quick mode runs cases 1.* and 2.* only.

Grading (`Grade`). Each case ends with two verdicts: `behavior` (OK, NON-STRICT,
INFORMATIONAL, UNIMPLEMENTED, FAILED, or ERROR when it could not run) and `behaviorClose`
(OK, INFORMATIONAL, or one of FAILED, FAILED BY CLIENT, UNCLEAN, WRONG CODE). kosoku's own
`passed` takes NON-STRICT and INFORMATIONAL as passes; here every verdict is counted on its
own. Conformant means no case FAILED (either verdict outside OK/NON-STRICT/INFORMATIONAL/
UNIMPLEMENTED), none NON-STRICT (a SHOULD of RFC 6455 we miss) and none UNIMPLEMENTED
(permessage-deflate is ours); INFORMATIONAL is behaviour the RFC leaves open (7.1.6,
7.13.x) and is reported, not judged.

Every run stands alone: the server binds port 0 (the port it got is read back), and the DPDK
run builds a lab of a name of its own unless the caller chose one, so two runs (two
engineers, a test beside a bench) never meet.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from wsgw_bench.core import BenchOptions, Measurement, lab_engine, scenario, unique_lab_name

#: Every client case of the Autobahn TestSuite: 517 (8 is absent from the suite, 11 does
#: not exist; 12 and 13 are permessage-deflate, 1000 messages per case).
CASES = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*", "12.*", "13.*"]
ALL_CASES = 517
QUICK = ["1.*", "2.*"]
# Exact ids for the sizes: kosoku's "*" also matches dots ("12.*.1" takes 12.1.10-18 too).
# kosoku runs a case once however many patterns match it.
_DEFLATE_GROUPS = [f"12.{g}" for g in range(1, 6)] + [f"13.{g}" for g in range(1, 8)]
#: The permessage-deflate part of the sample `make test` runs: the five smaller message sizes
#: of every 12.x/13.x group (each data set, each deflate offer), and all 18 sizes and
#: fragmentations of 12.1 and 13.1 (the JSON data set, what a feed carries). The larger sizes
#: of the other groups (1000 messages of 8-128 KiB, compressed both ways) are most of the
#: suite's time and run in `wsgw bench conformance` (make bench) or with WSGW_AUTOBAHN_FULL=1.
SAMPLE_12 = [f"{g}.{size}" for g in _DEFLATE_GROUPS[:5] for size in range(1, 6)] + ["12.1.*"]
SAMPLE_13 = [f"{g}.{size}" for g in _DEFLATE_GROUPS[5:] for size in range(1, 6)] + ["13.1.*"]
#: Every case of 1-10 (301) and the deflate sample: 387 cases.
SAMPLE = [*CASES[:9], *SAMPLE_12, *SAMPLE_13]
SAMPLE_CASES = 301 + len(_DEFLATE_GROUPS) * 5 + 13 + 13
#: What the DPDK test runs: every case of 1-10 and the five smaller sizes of 12.1 and 13.1
#: (JSON, compressed both ways). The WebSocket code above the transport is the kernel
#: test's, which runs the whole SAMPLE; over DPDK the bytes matter, not the data sets: 9.x
#: carries 16 MiB messages, 12.1/13.1 compressed frames, and the rest of 12.x/13.x (their
#: 1000 messages of up to 128 KiB, 58 of the 86 s the SAMPLE took here) adds no new path.
DPDK_SAMPLE = [*CASES[:9], *[f"{g}.{size}" for g in ("12.1", "13.1") for size in range(1, 6)]]
DPDK_SAMPLE_CASES = 301 + 2 * 5
LIMIT = 32 * 1024 * 1024  # 9.x sends 16 MiB messages
#: How long the server waits for the client to finish every case.
SUITE_TIMEOUT = 3600.0

OK = "OK"
NON_STRICT = "NON-STRICT"
INFORMATIONAL = "INFORMATIONAL"
UNIMPLEMENTED = "UNIMPLEMENTED"
FAILED = "FAILED"
#: behavior verdicts that are not failures (the rest, FAILED and ERROR, are)
_BEHAVIOR_NOT_FAILED = (OK, NON_STRICT, INFORMATIONAL, UNIMPLEMENTED)
#: behaviorClose verdicts that are not failures (FAILED, FAILED BY CLIENT, UNCLEAN, WRONG CODE are)
_CLOSE_NOT_FAILED = (OK, INFORMATIONAL)

# Runs in its own process (in the lab's peer namespace for DPDK), so that the cases' Python
# does not share our client's GIL; prints "ready PORT", then the results as JSON.
SERVER = """
import asyncio, json, sys, kosoku
cases, host, timeout = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
async def main():
    async with kosoku.run_fuzzingserver(cases, host=host, port=0) as server:
        print("ready", server.port, flush=True)
        try:
            results = list(await asyncio.wait_for(server.get_result(), timeout))
        except kosoku.FailureError as failure:
            results = list(failure.results)
        print(json.dumps([{"case": r.case_id, "behavior": r.behavior.value,
                           "close": r.behavior_close.value, "result": r.result,
                           "result_close": r.result_close, "ms": r.duration}
                          for r in results]), flush=True)
asyncio.run(main())
"""


@dataclass(frozen=True)
class CaseVerdict:
    """One case as the fuzzingserver judged it."""

    case: str
    behavior: str
    close: str
    result: str
    result_close: str
    ms: int  # the case's run time

    def __str__(self) -> str:
        return f"{self.case}: {self.behavior}/{self.close} ({self.result} {self.result_close})"


@dataclass(frozen=True)
class Grade:
    """The verdicts of a run, counted apart (see the module docstring)."""

    verdicts: tuple[CaseVerdict, ...]

    @property
    def behavior(self) -> Counter[str]:
        return Counter(v.behavior for v in self.verdicts)

    @property
    def close(self) -> Counter[str]:
        return Counter(v.close for v in self.verdicts)

    def _where(self, keep: Callable[[CaseVerdict], bool]) -> list[CaseVerdict]:
        return [v for v in self.verdicts if keep(v)]

    @property
    def failed(self) -> list[CaseVerdict]:
        return self._where(
            lambda v: v.behavior not in _BEHAVIOR_NOT_FAILED or v.close not in _CLOSE_NOT_FAILED
        )

    @property
    def non_strict(self) -> list[CaseVerdict]:
        return self._where(lambda v: v.behavior == NON_STRICT)

    @property
    def unimplemented(self) -> list[CaseVerdict]:
        return self._where(lambda v: v.behavior == UNIMPLEMENTED)

    @property
    def informational(self) -> list[CaseVerdict]:
        return self._where(lambda v: INFORMATIONAL in (v.behavior, v.close))

    @property
    def conformant(self) -> bool:
        return not (self.failed or self.non_strict or self.unimplemented)

    def summary(self) -> str:
        """`behavior OK 514, INFORMATIONAL 3; close OK 514, INFORMATIONAL 3`."""

        def counts(counter: Counter[str]) -> str:
            return ", ".join(f"{k} {n}" for k, n in sorted(counter.items()))

        return f"behavior {counts(self.behavior)}; close {counts(self.close)}"

    def problems(self) -> str:
        """Every case that keeps the run from being conformant, one a line."""
        kinds = [
            (FAILED, self.failed),
            (NON_STRICT, self.non_strict),
            (UNIMPLEMENTED, self.unimplemented),
        ]
        return "\n".join(f"{label} {v}" for label, cases in kinds for v in cases)


async def _client(base: str, connect: Any) -> None:
    """Autobahn's echo client: /getCaseCount, each /runCase echoing every message until
    the server closes, then /updateReports."""
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
            pass  # the failure cases end this way on purpose; the server judges
    async with connect(f"{base}/updateReports?agent=wsgw"):
        pass


def run_suite(
    lab: Any, cases: list[str], host: str, connect: Any, *, timeout: float = SUITE_TIMEOUT
) -> Grade:
    """The fuzzingserver (in the lab's peer namespace, or here when lab is None) on a free
    port, and our client through `connect(url, **options)`; the graded verdicts."""
    popen = lab.popen if lab is not None else subprocess.Popen
    server = popen(
        [sys.executable, "-c", SERVER, json.dumps(cases), host, str(timeout)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        ready, _, port = server.stdout.readline().strip().partition(" ")
        if ready != "ready" or not port.isdigit():
            raise RuntimeError("the fuzzingserver did not start")
        asyncio.run(_client(f"ws://{host}:{port}", connect))
        rows: list[dict[str, Any]] = json.loads(server.stdout.readline())
        return Grade(tuple(CaseVerdict(**row) for row in rows))
    finally:
        server.kill()
        server.wait()


#: The kernel run in three parts at once, each a fuzzingserver and a client process of its
#: own: 12.* and 13.* (1000 compressed echoes a case) are most of the time, and the client
#: and the server take turns, so apart they fill both CPUs (8 min -> about 4 here).
KERNEL_SHARDS = [CASES[:9], ["12.*"], ["13.*"]]
#: The sample in the same three parts.
KERNEL_SAMPLE_SHARDS = [CASES[:9], SAMPLE_12, SAMPLE_13]


def _kernel_shard(cases: list[str]) -> Grade:
    from dataplane.transports.kernel import connect_kernel

    return run_suite(None, cases, "127.0.0.1", connect_kernel)


def run_kernel_suite(shards: list[list[str]]) -> Grade:
    """run_suite on the kernel transport for each shard in a process of its own (spawned:
    no fork of a process with threads), the verdicts joined in case order."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(shards), mp_context=context) as pool:
        grades = list(pool.map(_kernel_shard, shards))
    return Grade(tuple(v for grade in grades for v in grade.verdicts))


def _measure(name: str, grade: Grade, seconds: float) -> list[Measurement]:
    def count(metric: str, cases: list[CaseVerdict]) -> Measurement:
        note = ", ".join(v.case for v in cases[:20]) + (" ..." if len(cases) > 20 else "")
        return Measurement(
            "conformance", metric, name, "cases", False, samples=[float(len(cases))], note=note
        )

    return [
        Measurement(
            "conformance",
            "Autobahn cases run",
            name,
            "cases",
            True,
            samples=[float(len(grade.verdicts))],
            note=grade.summary(),
        ),
        count("Autobahn cases FAILED", grade.failed),
        count("Autobahn cases NON-STRICT", grade.non_strict),
        count("Autobahn cases UNIMPLEMENTED", grade.unimplemented),
        count("Autobahn cases INFORMATIONAL", grade.informational),
        Measurement(
            "conformance", "Autobahn run time", name, "s", False, samples=[round(seconds, 1)]
        ),
    ]


def _timed(run: Callable[[], Grade]) -> tuple[Grade, float]:
    started = time.monotonic()
    grade = run()
    return grade, time.monotonic() - started


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
    cases = QUICK if options.quick else CASES
    shards = [QUICK] if options.quick else KERNEL_SHARDS
    grade, seconds = _timed(lambda: run_kernel_suite(shards))
    out = _measure("wsgw kernel transport", grade, seconds)
    if os.geteuid() != 0:
        return out
    from dataplane.engine import EngineConfig
    from dataplane.stack.tcp import TcpConfig
    from dataplane.transports.dpdk import connect_dpdk
    from gateway.lab import Lab

    lab = Lab(unique_lab_name(options, "conf"))
    lab.down()
    lab.up()
    try:
        tcp_config = TcpConfig(time_wait=0.2, recv_buffer=4 << 20, send_buffer=4 << 20)
        with lab_engine(lab, EngineConfig(), tcp_config) as engine:

            def connect(url: str, **kw: Any) -> Any:
                return connect_dpdk(url, engine=engine, **kw)

            grade, seconds = _timed(lambda: run_suite(lab, cases, lab.peer_ip, connect))
            out += _measure("wsgw DPDK transport", grade, seconds)
    finally:
        lab.down()
    return out
