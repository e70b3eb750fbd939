"""The DPDK side of the live runtime: the EAL, the ports the operator configured, and one
engine (lcore thread, stack, C fast path) per port. `LiveRuntime` calls it through its
`EngineHook` protocol; sessions with transport `dpdk` get their port's engine from it, and
(engine.mode "loop", the default) the event loop on the engine's thread to run on: the
stack, the WebSocket and the session then share that thread (`EngineLoopThread`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Any

from dataplane.dpdk import DpdkPort, Eal, EalConfig
from dataplane.engine import Engine, engine_config_from
from dataplane.errors import DataplaneError
from dataplane.loop import EngineLoopThread
from dataplane.stack.tcp import TcpConfig
from gateway.runtime.protocol import (
    EngineState,
    EngineStatus,
    PortSpec,
    PortState,
    PortStatus,
    RuntimeRefusedError,
)
from gateway.settings import Settings

log = logging.getLogger("wsgw.engines")


@dataclass
class _Running:
    spec: PortSpec
    port: DpdkPort
    engine: Engine
    runner: EngineLoopThread | None  # engine.mode "loop": the loop on the engine's thread

    def close(self) -> None:
        if self.runner is not None:
            try:
                self.runner.stop()  # cancels what still runs there, detaches the engine
            except RuntimeError:
                # Still in a turn: closing the engine and port under it would crash the
                # process. They are left to the process's exit (logged, never silent).
                log.exception("port %s: its engine loop did not stop; left open", self.spec.name)
                return
        self.engine.close()
        self.port.close()


class DpdkEngines:
    """Ports and their engines, opened on demand; thread-safe (the API thread calls in)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._ports: dict[int, _Running] = {}
        self._failed: dict[int, str] = {}
        self._eal_error: str | None = None

    def _eal(self) -> Eal:
        d = self.settings.dpdk
        try:
            return Eal.init(
                EalConfig(
                    lcores=d.lcores,
                    hugepages=d.hugepages,
                    memory_mb=d.memory_mb,
                    file_prefix=d.file_prefix,
                    pci_allow=tuple(d.pci_allow),
                    driver_paths=tuple(d.driver_paths),
                    log_level=d.log_level,
                    extra_args=tuple(d.extra_args),
                )
            )
        except DataplaneError as exc:
            self._eal_error = str(exc)
            raise RuntimeRefusedError(f"DPDK is not available: {exc}") from exc

    def status(self) -> EngineStatus:
        with self._lock:
            if self._eal_error is not None:
                return EngineStatus(EngineState.FAILED, self._eal_error)
            if not self._ports:
                return EngineStatus(
                    EngineState.RUNNING if Eal.current() else EngineState.STARTING,
                    "no DPDK port is up",
                )
            details: dict[str, Any] = {
                f"port{pid}": run.engine.snapshot() for pid, run in self._ports.items()
            }
            running = all(run.engine.running for run in self._ports.values())
            return EngineStatus(
                EngineState.RUNNING if running else EngineState.FAILED,
                None if running else "an engine thread stopped",
                details,
            )

    def port_up(self, port: PortSpec) -> PortStatus:
        with self._lock:
            if port.id in self._ports:
                return PortStatus(port.id, PortState.UP)
            eal = self._eal()
            p = self.settings.port
            try:
                dpdk_port = eal.open_port(
                    port.device,
                    n_mbufs=p.n_mbufs,
                    mbuf_cache=p.mbuf_cache,
                    rx_desc=p.rx_desc,
                    tx_desc=p.tx_desc,
                    mtu=port.mtu,
                    burst=p.burst,
                )
            except DataplaneError as exc:
                self._failed[port.id] = str(exc)
                raise RuntimeRefusedError(f"port {port.name}: {exc}") from exc
            try:
                engine = Engine.on_port(
                    dpdk_port,
                    port.ipv4,
                    port.netmask,
                    port.gateway,
                    mtu=port.mtu,
                    tcp_config=TcpConfig(recv_buffer=4 << 20),
                    config=engine_config_from(self.settings.engine),
                )
                runner = None
                if self.settings.engine.mode == "loop":
                    runner = EngineLoopThread(engine, name=f"wsgw-engine-{port.id}")
                    runner.start()
                else:
                    engine.start()
            except BaseException as exc:
                dpdk_port.close()
                self._failed[port.id] = str(exc)
                raise RuntimeRefusedError(f"port {port.name}: engine: {exc}") from exc
            self._ports[port.id] = _Running(port, dpdk_port, engine, runner)
            self._failed.pop(port.id, None)
            log.info("port %s up: %s, %s/%s", port.name, port.device, port.ipv4, port.netmask)
            return PortStatus(port.id, PortState.UP)

    def port_down(self, port_id: int) -> None:
        with self._lock:
            run = self._ports.pop(port_id, None)
        if run is not None:
            run.close()

    def port_status(self, port_id: int) -> PortStatus:
        with self._lock:
            if port_id in self._ports:
                return PortStatus(port_id, PortState.UP)
            if port_id in self._failed:
                return PortStatus(port_id, PortState.FAILED, self._failed[port_id])
            return PortStatus(port_id, PortState.DOWN)

    def pinned_cpu(self) -> int | None:
        """The CPU the engine of the lowest-numbered port is pinned to (engine.cpu), None
        when no port is up or its engine floats: what readers of the ring are told."""
        with self._lock:
            if not self._ports:
                return None
            return self._ports[min(self._ports)].engine.config.cpu

    def engine_for(self, port_id: int | None) -> Engine:
        return self._running(port_id).engine

    def loop_for(self, port_id: int | None) -> asyncio.AbstractEventLoop | None:
        run = self._running(port_id)
        if run.runner is None:
            return None
        if not run.runner.alive:
            raise RuntimeRefusedError(f"the engine loop of DPDK port {run.spec.id} stopped")
        return run.runner.loop

    def _running(self, port_id: int | None) -> _Running:
        """The port a session leaves through: port_id, or the only one when None."""
        with self._lock:
            if port_id is None and len(self._ports) == 1:
                return next(iter(self._ports.values()))
            run = self._ports.get(port_id) if port_id is not None else None
            if run is None:
                raise RuntimeRefusedError(f"DPDK port {port_id} is not up")
            return run

    def close(self) -> None:
        with self._lock:
            ports = list(self._ports.values())
            self._ports.clear()
        for run in ports:
            run.close()
