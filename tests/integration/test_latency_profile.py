"""The latency profile (one setting): what it sets in the engine's configuration and in the
ring's header, how a consumer in another process follows it (wait "auto") or overrides it,
the header field's round trip, and the refusal of bad values. Real rings in /dev/shm, real
engines on an in-memory link, consumers in spawned processes; no timing asserts."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import dataplane.engine as engine_module
from dataplane.engine import Engine, engine_config_from, first_isolated_cpu
from dataplane.errors import DataplaneError
from dataplane.links.memory import memory_link_pair
from dataplane.ring import SHM_DIR, RingReader, RingWriter, WaitPolicy, ring_name
from dataplane.shim import (
    RING_WAIT_BUSY,
    RING_WAIT_SPIN,
    ring_set_wait_hint,
)
from dataplane.stack.iface import Interface
from gateway.client import Client
from gateway.hub.config import HubConfig, create_hub
from gateway.lab import Lab
from gateway.runtime import PortSpec, PortState
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import LiveRuntime
from gateway.settings import EngineSettings, Settings
from tests.conftest import requires_dpdk

CTX = mp.get_context("spawn")
PREFIX = f"wsgw-test-{os.getpid()}-lp"
IP, MASK = 0xC0000201, 0xFFFFFF00


@pytest.fixture
def gateway(request: pytest.FixtureRequest) -> Iterator[str]:
    """A gateway name of this test's own; its ring files are removed afterwards."""
    name = f"{PREFIX}{abs(hash(request.node.name)) % 10**6}"
    try:
        yield name
    finally:
        for path in SHM_DIR.glob(f"wsgw-{name}-*"):
            path.unlink(missing_ok=True)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No WSGW_* variable or wsgw.toml of the machine leaks into the settings."""
    for key in list(os.environ):
        if key.startswith("WSGW_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


# ---- the setting ------------------------------------------------------------------------------
@pytest.mark.usefixtures("clean_env")
def test_economical_is_the_default_and_sets_nothing_that_costs_cpu() -> None:
    s = Settings()
    assert s.latency_profile == "economical"
    assert (s.engine.poll_mode, s.engine.cpu, s.hub.reader_wait) == ("adaptive", None, "futex")
    assert s.engine.budget_us == 20_000  # an idle engine's Python side runs 50 times a second


@pytest.mark.usefixtures("clean_env")
def test_low_latency_sets_busy_polling_an_isolated_cpu_and_busy_readers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WSGW_LATENCY_PROFILE", "low-latency")
    s = Settings()
    assert s.latency_profile == "low-latency"
    assert (s.engine.poll_mode, s.engine.cpu, s.hub.reader_wait) == ("busy", "isolated", "busy")
    assert s.engine.budget_us == 2000


@pytest.mark.usefixtures("clean_env")
def test_knobs_set_explicitly_keep_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WSGW_LATENCY_PROFILE", "low-latency")
    monkeypatch.setenv("WSGW_ENGINE__POLL_MODE", "adaptive")
    monkeypatch.setenv("WSGW_HUB__READER_WAIT", "spin:200")
    s = Settings()
    assert (s.engine.poll_mode, s.engine.cpu, s.hub.reader_wait) == (
        "adaptive",
        "isolated",
        "spin:200",
    )
    monkeypatch.delenv("WSGW_HUB__READER_WAIT")
    given = EngineSettings(cpu=1)
    s = Settings(latency_profile="low-latency", engine=given)
    assert (s.engine.poll_mode, s.engine.cpu) == ("busy", 1)
    s = Settings(engine={"budget_us": 2000})  # type: ignore[arg-type]
    assert s.engine.budget_us == 2000
    assert given.poll_mode == "adaptive"  # the caller's object is not changed under it
    s = Settings(latency_profile="economical", engine={"poll_mode": "busy"})  # type: ignore[arg-type]
    assert (s.engine.poll_mode, s.hub.reader_wait) == ("busy", "futex")


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WSGW_LATENCY_PROFILE", "fast"),
        ("WSGW_LATENCY_PROFILE", "low_latency"),
        ("WSGW_LATENCY_PROFILE", ""),
        ("WSGW_HUB__READER_WAIT", "nap"),
        ("WSGW_HUB__READER_WAIT", "busy:5"),
        ("WSGW_HUB__READER_WAIT", "spin:-1"),
        ("WSGW_HUB__READER_WAIT", "adaptive:x"),
        ("WSGW_HUB__READER_WAIT", "adaptive:"),
        ("WSGW_ENGINE__CPU", "any"),
    ],
)
def test_bad_values_are_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError):
        Settings()


@pytest.mark.usefixtures("clean_env")
def test_the_adaptive_policy_can_be_the_gateways_advice(
    monkeypatch: pytest.MonkeyPatch, gateway: str
) -> None:
    monkeypatch.setenv("WSGW_HUB__READER_WAIT", "adaptive:150")
    reader_wait = Settings().hub.reader_wait
    assert reader_wait == "adaptive:150"
    assert _run_consumer(gateway, reader_wait, None) == (
        "adaptive:150",
        "gateway",
        "adaptive:150 (the gateway's)",
    )


@pytest.mark.usefixtures("clean_env")
def test_serve_refuses_to_start_with_a_bad_profile(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSGW_")}
    env |= {"WSGW_LATENCY_PROFILE": "turbo", "WSGW_STATE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode != 0
    assert "latency_profile" in proc.stdout + proc.stderr


# ---- the engine -------------------------------------------------------------------------------
def _idle_sleeps(settings: Settings) -> int:
    """How often an idle engine built from these settings slept in ~0.3 s of polling."""
    a, _ = memory_link_pair()
    engine = Engine(
        Interface(a.mac, IP, MASK, announce=False),
        link=a,
        config=engine_config_from(settings.engine),
    )
    engine.start()
    try:
        deadline = time.monotonic() + 10
        while engine.snapshot().get("c_polls", 0) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        snapshot = engine.snapshot()
    finally:
        engine.close()
    assert snapshot["c_polls"] >= 20
    return int(snapshot["c_sleeps"])


@pytest.mark.usefixtures("clean_env")
def test_the_profile_decides_whether_the_idle_engine_sleeps() -> None:
    economical = Settings(latency_profile="economical")
    low = Settings(latency_profile="low-latency")
    assert engine_config_from(economical.engine).fastpath.poll_mode == "adaptive"
    assert engine_config_from(low.engine).fastpath.poll_mode == "busy"
    assert _idle_sleeps(economical) > 0
    assert _idle_sleeps(low) == 0


def test_isolated_means_the_first_isolated_online_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cpu_dir = tmp_path / "sys/devices/system/cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text("0-7\n")
    monkeypatch.setattr(engine_module, "ISOLATED_CPUS", cpu_dir / "isolated")
    assert first_isolated_cpu() is None  # no such file: nothing isolated
    (cpu_dir / "isolated").write_text("\n")
    assert first_isolated_cpu() is None
    assert engine_config_from(EngineSettings(cpu="isolated")).cpu is None  # not pinned
    (cpu_dir / "isolated").write_text("3,5-6,9\n")  # 9 is not online
    assert first_isolated_cpu() == 3
    assert engine_config_from(EngineSettings(cpu="isolated")).cpu == 3
    assert engine_config_from(EngineSettings(cpu=2)).cpu == 2  # a CPU given stays


@pytest.mark.usefixtures("clean_env")
def test_the_engine_slice_comes_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine_config_from(Settings().engine).slice_ns == 100_000  # the default
    monkeypatch.setenv("WSGW_ENGINE__SLICE_US", "0")
    assert engine_config_from(Settings().engine).slice_ns is None  # the kernel's
    monkeypatch.setenv("WSGW_ENGINE__SLICE_US", "250")
    assert engine_config_from(Settings().engine).slice_ns == 250_000
    with pytest.raises(ValueError, match="slice_us"):
        EngineSettings(slice_us=-1)


# ---- the ring header's wait hint ------------------------------------------------------------
@pytest.mark.parametrize("policy", ["futex", "busy", "spin:250", "spin:0.5", "spin:10000000"])
def test_wait_hint_round_trip(gateway: str, policy: str) -> None:
    with RingWriter.create(ring_name(gateway), 1 << 16) as writer:
        with RingReader.attach(ring_name(gateway)) as reader:
            assert writer.wait_hint is None and reader.wait_hint is None  # a new ring: none
        writer.set_wait_hint(policy)
        assert writer.wait_hint == WaitPolicy.parse(policy)
        with RingReader.attach(ring_name(gateway)) as reader:
            assert reader.wait_hint == WaitPolicy.parse(policy)
            writer.set_wait_hint(None)  # withdrawn: readers see it at once
            assert reader.wait_hint is None


def test_wait_hint_bad_values(gateway: str) -> None:
    with RingWriter.create(ring_name(gateway), 1 << 16) as writer:
        with pytest.raises(ValueError, match="wait policy"):
            writer.set_wait_hint("nap")
        handle = writer._live()
        assert ring_set_wait_hint(handle, RING_WAIT_SPIN, 0) < 0  # spin needs a time
        assert ring_set_wait_hint(handle, RING_WAIT_BUSY, 5) < 0  # only spin takes one
        assert ring_set_wait_hint(handle, 7, 0) < 0
        assert ring_set_wait_hint(handle, RING_WAIT_SPIN, 1 << 48) < 0
        assert writer.wait_hint is None


def test_a_garbled_wait_hint_reads_as_no_advice(gateway: str) -> None:
    """The file is untrusted input for readers: an unknown mode is no advice, never an error."""
    with RingWriter.create(ring_name(gateway), 1 << 16) as writer:
        writer.set_wait_hint("busy")
        path = SHM_DIR / ring_name(gateway)
        with path.open("r+b") as f:
            f.seek(128)  # control line 2: wait_hint (wsgw_ring.h)
            f.write(((9 << 48) | 1).to_bytes(8, "little"))
        with RingReader.attach(ring_name(gateway)) as reader:
            assert reader.wait_hint is None
            assert (reader.wait_policy, reader.wait_origin) == (WaitPolicy("futex"), "default")


# ---- consumers in other processes -----------------------------------------------------------
def _consumer(gateway: str, wait: str | None, out: Queue[Any]) -> None:
    """Another process: attach as a consumer does, say how it waits, read one message."""
    kwargs: dict[str, Any] = {} if wait is None else {"wait": wait}
    with Client.attach("messages", gateway=gateway, copy=True, **kwargs) as client:
        out.put(("ready", str(client.wait_policy), client.wait_origin, client.describe_wait()))
        events = client.read(timeout=20)
        out.put(("read", [bytes(e.payload) for e in events if hasattr(e, "payload")]))


def _run_consumer(gateway: str, hub_wait: str | None, wait: str | None) -> tuple[Any, ...]:
    """A hub made as `wsgw serve` makes it (reader_wait from the profile), a consumer in a
    spawned process; returns what the consumer reported."""
    hub = create_hub(HubConfig(gateway=gateway, ring_capacity=1 << 16, reader_wait=hub_wait))
    out: Queue[Any] = CTX.Queue()
    proc = CTX.Process(target=_consumer, args=(gateway, wait, out), daemon=True)
    proc.start()
    try:
        ready = out.get(timeout=60)
        assert hub.ring is not None
        hub.ring.write(1, 0, b"first")
        read = out.get(timeout=30)
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        hub.close()
    assert read == ("read", [b"first"])
    return tuple(ready[1:])


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("profile", "wait", "expected"),
    [
        ("economical", None, ("futex", "gateway", "futex (the gateway's)")),
        ("low-latency", None, ("busy", "gateway", "busy (the gateway's)")),
        ("low-latency", "auto", ("busy", "gateway", "busy (the gateway's)")),
        ("low-latency", "futex", ("futex", "given", "futex (given)")),
        ("economical", "spin:300", ("spin:300", "given", "spin:300 (given)")),
    ],
)
def test_a_consumer_process_follows_the_profile_unless_told_otherwise(
    gateway: str, profile: str, wait: str | None, expected: tuple[str, str, str]
) -> None:
    reader_wait = Settings(latency_profile=profile).hub.reader_wait  # type: ignore[arg-type]
    assert _run_consumer(gateway, reader_wait, wait) == expected


def test_a_ring_without_advice_gets_the_futex_default(gateway: str) -> None:
    assert _run_consumer(gateway, None, None) == ("futex", "default", "futex (default)")


def test_consume_cli_says_how_it_waits(gateway: str) -> None:
    hub = create_hub(HubConfig(gateway=gateway, ring_capacity=1 << 16, reader_wait="busy"))
    try:
        lines = []
        for wait in ("auto", "spin:50"):
            proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "gateway.cli", "consume", "--gateway", gateway),
                    *("--wait", wait, "--count", "1", "--timeout", "20"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert proc.stderr is not None
            lines.append(proc.stderr.readline().strip())  # printed once attached
            assert hub.ring is not None
            hub.ring.write(1, 0, b"m")
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            assert out.rstrip("\n").endswith(" m")
    finally:
        hub.close()
    assert lines == [
        f"consuming wsgw-{gateway}-messages, wait busy (the gateway's)",
        f"consuming wsgw-{gateway}-messages, wait spin:50 (given)",
    ]


# ---- where a reader sleeps: on the engine's CPU ---------------------------------------------
def test_writer_cpu_round_trip_and_refusals(gateway: str) -> None:
    with (
        RingWriter.create(ring_name(gateway), 1 << 16) as writer,
        RingReader.attach(ring_name(gateway)) as reader,
    ):
        assert reader.writer_cpu is None  # a new ring: nothing published
        writer.set_writer_cpu(1)
        assert reader.writer_cpu == 1
        writer.set_writer_cpu(None)
        assert reader.writer_cpu is None
        for bad in (-2, 4096):
            with pytest.raises(DataplaneError, match="writer cpu"):
                writer.set_writer_cpu(bad)
        assert reader.writer_cpu is None


def test_a_garbled_writer_cpu_reads_as_none(gateway: str) -> None:
    with RingWriter.create(ring_name(gateway), 1 << 16) as writer:
        writer.set_writer_cpu(0)
        with (SHM_DIR / ring_name(gateway)).open("r+b") as f:
            f.seek(144)  # control line 2: writer_cpu (wsgw_ring.h)
            f.write((0xFFFFFFFF).to_bytes(4, "little"))
        with RingReader.attach(ring_name(gateway)) as reader:
            assert reader.writer_cpu is None


def test_a_bad_cpu_is_refused_and_frees_the_readers_slot(gateway: str) -> None:
    with RingWriter.create(ring_name(gateway), 1 << 16) as writer:
        with pytest.raises(ValueError, match=r"engine\.cpu"):
            Client.attach("messages", gateway=gateway, cpu="engine")  # none published
        writer.set_writer_cpu(0)
        with pytest.raises(ValueError, match="CPU 4095"):
            Client.attach("messages", gateway=gateway, cpu=4095)
        with pytest.raises(ValueError, match="CPU number"):
            Client.attach("messages", gateway=gateway, cpu=-1)
        assert writer.readers() == []  # every refused reader was closed


def _pinned_consumer(gateway: str, out: Queue[Any]) -> None:
    """Another process: attach on the engine's CPU, read one message, say where it ran."""
    with Client.attach("messages", gateway=gateway, copy=True, cpu="engine") as client:
        out.put(("ready", sorted(os.sched_getaffinity(0))))
        events = client.read(timeout=20)
        # /proc/thread-self/stat field 39: the CPU this thread last ran on.
        ran_on = int(Path("/proc/thread-self/stat").read_text().rpartition(")")[2].split()[36])
        out.put(("read", [bytes(e.payload) for e in events if hasattr(e, "payload")], ran_on))


@requires_dpdk
@pytest.mark.dpdk
def test_a_reader_attached_with_cpu_engine_runs_on_the_engines_cpu(  # type: ignore[no-untyped-def]
    eal, lab: Lab, gateway: str
) -> None:
    """The runtime publishes the pinned engine's CPU in the ring's header when the port comes
    up (and withdraws it when it goes); a consumer in another process pins itself there."""
    cpu = max(os.sched_getaffinity(0))
    hub = create_hub(HubConfig(gateway=gateway, ring_capacity=1 << 16))
    settings = Settings(engine={"cpu": cpu})  # type: ignore[arg-type]
    runtime = LiveRuntime(hub, engine_factory=lambda: DpdkEngines(settings), hub=hub)
    out: Queue[Any] = CTX.Queue()
    proc = None
    try:
        assert hub.ring is not None
        port = PortSpec(1, "lab", lab.vdev, lab.gw_ip, lab.netmask, None, 1500)
        assert runtime.port_up(port).state is PortState.UP
        with RingReader.attach(ring_name(gateway)) as reader:
            assert reader.writer_cpu == cpu
        proc = CTX.Process(target=_pinned_consumer, args=(gateway, out), daemon=True)
        proc.start()
        assert out.get(timeout=60) == ("ready", [cpu])
        hub.ring.write(1, 0, b"first")
        assert out.get(timeout=30) == ("read", [b"first"], cpu)
        proc.join(30)
        assert proc.exitcode == 0
        runtime.port_down(1)
        with RingReader.attach(ring_name(gateway)) as reader:
            assert reader.writer_cpu is None  # no engine left: nothing to sleep next to
    finally:
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(10)
        runtime.close()
