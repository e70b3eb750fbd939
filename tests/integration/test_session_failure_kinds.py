"""Every failure kind x both transports: the upstream fails that way for a few attempts,
the session retries (each failure counted by kind, every backoff event carrying its cause),
then the upstream comes back and the session streams again.

The upstream is the feed simulator behind `faulty_upstream.py`, both on the kernel in the
lab's peer namespace. The dpdk column reaches them through a DPDK port on the lab's veth
(wsgw's own TCP/IP stack, the engine on its thread); the kernel column from the lab's
kernel-client namespace (the session's loop runs on a thread that joined it), so both meet
the same peer, and "unreachable" is an unused address of each one's own subnet: nothing
leaves the lab, ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dataplane.engine import Engine
from dataplane.stack.tcp import TcpConfig
from gateway.dialects import make_dialect
from gateway.lab import Lab
from gateway.sessions import (
    HeartbeatConfig,
    ReconnectPolicy,
    RecordingSink,
    State,
    TlsOptions,
    UpstreamSession,
)
from gateway.simulator.process import start_simulator
from gateway.simulator.tls import TlsFiles, ensure_certs
from tests.conftest import fresh_lab, requires_dpdk, requires_root
from tests.integration.test_sessions_helpers import EventLog, fast_config, until
from tests.integration.test_simulator_helpers import TOPICS

T = TypeVar("T")
SIM_PORT = 9410
FRONT = Path(__file__).with_name("faulty_upstream.py")
TOPIC_LIST = TOPICS["binance"]
CLONE_NEWNET = 0x40000000
FAILURES = 2  # failed attempts (or lost connections) before the upstream comes back


@dataclass(frozen=True)
class Case:
    mode: str  # faulty_upstream.py's
    kind: str  # the FailureKind every backoff must carry
    text: str  # in every backoff's reason, whichever transport ("|": one of these)
    lost: bool = False  # the connection opens and is lost (not a failed open)
    open_timeout: float = 1.0  # each attempt's
    unreachable: bool = False  # an address nobody answers ARP for, until it is added


CASES = [
    Case("refused", "refused", "refused"),
    Case("reset", "reset", "reset"),
    Case("silent", "timeout", "timed out after 1.0 s"),
    Case("http503", "handshake", "handshake rejected with HTTP 503: exchange restarting"),
    Case("accept", "handshake", "Sec-WebSocket-Accept does not match our key: expected '"),
    Case("eof", "eof", "connection closed before the handshake finished"),
    Case("drop", "reset", "close code 1006", lost=True),
    Case("protocol", "protocol", "close code 1002", lost=True),
    Case("closefin", "eof", "close code 1006", lost=True),
    Case("restart", "closed", "close code 1012 (service restart)", lost=True),
    Case("tls", "certificate", "TLS certificate rejected"),
    # The kernel's EHOSTUNREACH, the stack's HostUnreachableError: no ARP reply either way.
    Case(
        "refused",
        "unreachable",
        "No route to host|no ARP reply",
        open_timeout=5.0,
        unreachable=True,
    ),
]
CASE_IDS = [c.kind if c.unreachable else c.mode for c in CASES]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    """One lab for the module, with the kernel-client namespace; removed afterwards."""
    with fresh_lab(f"f{os.getpid() % 100000}", kernel_client=True) as made:
        yield made


@pytest.fixture(scope="module")
def simulator(lab: Lab) -> Iterator[subprocess.Popen[str]]:
    proc = start_simulator(lab, SIM_PORT, 400)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def certs(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsFiles, TlsFiles]:
    """(trusted, untrusted): two CAs, each with a certificate for both peer addresses."""
    hosts = [lab.peer_ip, lab.peer_client_ip]
    root = tmp_path_factory.mktemp("failure-certs")
    return ensure_certs(root / "good", hosts), ensure_certs(root / "bad", hosts)


@pytest.fixture(scope="module")
def dpdk_engine(eal, lab: Lab) -> Iterator[Engine]:  # type: ignore[no-untyped-def]
    """An engine on a DPDK port on the lab's veth, on its own thread."""
    port = eal.open_port(lab.vdev)
    engine = Engine.on_port(port, lab.gw_ip, lab.netmask, tcp_config=TcpConfig(time_wait=0.2))
    try:
        engine.start()
        yield engine
    finally:
        engine.close()
        port.close()


@contextlib.contextmanager
def faulty_front(
    lab: Lab, port: int, mode: str, certs: tuple[TlsFiles, TlsFiles]
) -> Iterator[subprocess.Popen[str]]:
    command = [sys.executable, str(FRONT), "--port", str(port), "--mode", mode]
    command += ["--upstream", f"{lab.peer_ip}:{SIM_PORT}"]
    if mode == "tls":
        command += ["--tls", str(certs[0].ca.parent), str(certs[1].ca.parent)]
    proc = lab.popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def heal(front: subprocess.Popen[str]) -> None:
    assert front.stdin is not None and front.stdout is not None
    front.stdin.write("heal\n")
    front.stdin.flush()
    assert front.stdout.readline().strip() == "healed"


def in_namespace(netns: str, main: Callable[[], Awaitable[T]], timeout: float) -> T:
    """main() on a fresh event loop on a thread that joined netns (setns(2) moves only the
    calling thread): its sockets live there; the thread, and its membership, end with it."""
    outcome: dict[str, Any] = {}

    def body() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns({netns})")
        finally:
            os.close(fd)
        outcome["value"] = asyncio.run(asyncio.wait_for(main(), timeout))

    def guarded() -> None:
        try:
            body()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=guarded, name=f"in-{netns}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


async def fail_then_recover(
    case: Case,
    url: str,
    front: subprocess.Popen[str],
    come_back: Callable[[], None],
    **session_options: Any,
) -> None:
    """The session against the failing upstream, then against the one that came back."""
    tls = session_options.pop("tls", TlsOptions())
    config = fast_config(
        url,
        "binance",
        reconnect=ReconnectPolicy(initial_delay_s=0.05, max_delay_s=0.2),
        heartbeat=HeartbeatConfig(ping_interval_s=0.5, ping_timeout_s=3.0),
        open_timeout_s=case.open_timeout,
        tls=tls,
        **session_options.pop("overrides", {}),
    )
    sink, events = RecordingSink(), EventLog()
    session = UpstreamSession(
        1, config, sink, on_event=events.append, topics=TOPIC_LIST, **session_options
    )
    session.start()
    try:
        failures = session.counters.failures
        await until(lambda: failures[case.kind] >= FAILURES, timeout=8 * case.open_timeout + 10)
        backoffs = events.entered("backoff")
        assert len(backoffs) >= FAILURES
        for event in backoffs:
            assert event.details["kind"] == case.kind, event
            assert any(text in event.reason for text in case.text.split("|")), event.reason
            assert event.reason.startswith("connection lost" if case.lost else "connect failed")
        if case.lost:
            assert session.counters.connect_failures == 0
            assert session.counters.reconnects >= FAILURES
        else:
            assert session.counters.connect_failures >= FAILURES
            assert session.counters.connects == 0
        assert set(failures) == {case.kind}  # nothing else went wrong meanwhile
        await asyncio.to_thread(come_back)
        # A connection opened since, streaming, and more messages than a `drop` connection
        # lets through (4 KiB): the feed is back for good, not between two failures.
        healed_at = session.counters.connects
        await until(
            lambda: session.counters.connects > healed_at and session.state is State.STREAMING,
            timeout=case.open_timeout + 10,
        )
        before = len(sink.messages())
        await until(lambda: len(sink.messages()) >= before + 60, timeout=10)
        assert not [e for e in events if "internal error" in e.reason]
    finally:
        await session.stop()
    assert session.state is State.STOPPED


def url_for(case: Case, host: str, port: int) -> str:
    scheme = "wss" if case.mode == "tls" else "ws"
    return f"{scheme}://{host}:{port}/binance{make_dialect('binance').path}"


@contextlib.contextmanager
def address_added_on_heal(lab: Lab, case: Case, address: str, device: str) -> Iterator[list[str]]:
    """Records the address `come_back` adds to the peer (unreachable cases), and removes it."""
    added: list[str] = []
    try:
        yield added
    finally:
        for cidr in added:
            lab.exec(["ip", "addr", "del", cidr, "dev", device], check=False)


def _heal_with(lab: Lab, front: subprocess.Popen[str], case: Case, address: str, device: str,
               added: list[str]) -> Callable[[], None]:  # fmt: skip
    def come_back() -> None:
        if case.unreachable:
            added.append(f"{address}/24")
            lab.exec(["ip", "addr", "add", f"{address}/24", "dev", device])
        heal(front)

    return come_back


@requires_root
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_kernel_transport_retries_every_failure_kind_then_recovers(
    lab: Lab, simulator: Any, certs: tuple[TlsFiles, TlsFiles], case: Case
) -> None:
    port = 9500 + CASES.index(case)
    host = f"198.19.{lab.index}.99" if case.unreachable else lab.peer_client_ip
    with (
        faulty_front(lab, port, case.mode, certs) as front,
        address_added_on_heal(lab, case, host, lab.peer_client_if) as added,
    ):
        come_back = _heal_with(lab, front, case, host, lab.peer_client_if, added)
        tls = TlsOptions(ca_file=str(certs[0].ca)) if case.mode == "tls" else TlsOptions()
        in_namespace(
            lab.client_netns,
            lambda: fail_then_recover(case, url_for(case, host, port), front, come_back, tls=tls),
            timeout=60,
        )


@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_dpdk_transport_retries_every_failure_kind_then_recovers(
    lab: Lab,
    simulator: Any,
    certs: tuple[TlsFiles, TlsFiles],
    dpdk_engine: Engine,
    case: Case,
) -> None:
    port = 9600 + CASES.index(case)
    host = lab.unused_ip if case.unreachable else lab.peer_ip
    with (
        faulty_front(lab, port, case.mode, certs) as front,
        address_added_on_heal(lab, case, host, lab.peer_if) as added,
    ):
        come_back = _heal_with(lab, front, case, host, lab.peer_if, added)
        tls = TlsOptions(ca_file=str(certs[0].ca)) if case.mode == "tls" else TlsOptions()
        overrides = {"transport": "dpdk"}

        async def main() -> None:
            await fail_then_recover(
                case,
                url_for(case, host, port),
                front,
                come_back,
                tls=tls,
                engine=dpdk_engine,
                overrides=overrides,
            )

        asyncio.run(asyncio.wait_for(main(), 60))


async def retried_as_unreachable(url: str, **session_options: Any) -> None:
    """An address no route leads to: each attempt fails at once as `unreachable`, and the
    session keeps trying (it cannot come back: nothing in the lab routes there)."""
    overrides = session_options.pop("overrides", {})
    config = fast_config(url, "binance", open_timeout_s=1.0, **overrides)
    sink, events = RecordingSink(), EventLog()
    session = UpstreamSession(
        1, config, sink, on_event=events.append, topics=TOPIC_LIST, **session_options
    )
    session.start()
    try:
        await until(lambda: session.counters.failures["unreachable"] >= 3, timeout=10)
        assert session.state in (State.BACKOFF, State.CONNECTING)
        for event in events.entered("backoff"):
            assert event.details["kind"] == "unreachable"
            assert event.reason.startswith("connect failed: 10.255.255.1:9000: ")
    finally:
        await session.stop()
    assert set(session.counters.failures) == {"unreachable"}
    assert session.state is State.STOPPED  # stopped by us, never failed


NO_ROUTE_URL = "ws://10.255.255.1:9000/binance/stream"  # off every lab subnet, no gateway


@requires_root
def test_kernel_no_route_is_unreachable_and_retried(lab: Lab) -> None:
    in_namespace(lab.client_netns, lambda: retried_as_unreachable(NO_ROUTE_URL), timeout=30)


@requires_dpdk
@pytest.mark.dpdk
def test_dpdk_no_route_is_unreachable_and_retried(dpdk_engine: Engine) -> None:
    async def main() -> None:
        await retried_as_unreachable(
            NO_ROUTE_URL, engine=dpdk_engine, overrides={"transport": "dpdk"}
        )

    asyncio.run(asyncio.wait_for(main(), 30))


@requires_dpdk
@pytest.mark.dpdk
def test_dpdk_name_resolved_to_the_ports_own_address_is_retried(
    lab: Lab, dpdk_engine: Engine
) -> None:
    """A resolver may answer a sinkhole or the host itself during an outage: for a URL that
    names a host, the stack's refusal to connect to its own address is `unreachable` and
    retried (the next answer may differ), not a configuration error that ends the session."""

    async def own_address(host: str, port: int, family: int) -> list[str]:
        return [lab.gw_ip]

    async def main() -> None:
        config = fast_config(
            "ws://feed.test:9000/binance/stream", "binance", open_timeout_s=1.0, transport="dpdk"
        )
        events = EventLog()
        session = UpstreamSession(
            1,
            config,
            RecordingSink(),
            on_event=events.append,
            topics=TOPIC_LIST,
            engine=dpdk_engine,
            resolver=own_address,
        )
        session.start()
        try:
            await until(lambda: session.counters.failures["unreachable"] >= 2, timeout=10)
        finally:
            await session.stop()
        assert session.state is State.STOPPED  # stopped by us, never failed

    asyncio.run(asyncio.wait_for(main(), 30))
