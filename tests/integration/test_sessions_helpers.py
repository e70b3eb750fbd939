"""Helpers for the session tests against the simulator (no tests here): fast settings, an
event log, order checks on what reached the sink."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import orjson

from gateway.sessions import (
    GapMark,
    HeartbeatConfig,
    ReconnectPolicy,
    RecordingSink,
    SessionConfig,
    SessionEvent,
    State,
    UpstreamSession,
)
from gateway.settings import Settings

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], object], what: str = "condition", timeout: float = 30.0
) -> None:
    """Poll `predicate` every 20 ms until it is true; the test fails naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not met in {timeout} s"
        time.sleep(0.02)


def local_settings(tmp_path: Path, **overrides: object) -> Settings:
    """A gateway under test on this host: its state and SQLite file in tmp_path, a fake
    /sys and /proc there (the host manager reads nothing real), no auth, the API on loopback."""
    data: dict[str, object] = {
        "state_dir": tmp_path,
        "db": {"url": f"sqlite:///{tmp_path / 'wsgw.db'}"},
        "host": {"sys_root": tmp_path / "sys", "proc_root": tmp_path / "proc"},
        "auth": {"mode": "none"},
        "api": {"host": "127.0.0.1"},
    }
    data.update(overrides)
    return Settings(**data)  # type: ignore[arg-type]


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(main())


def fast_config(url: str, dialect: str, **overrides: Any) -> SessionConfig:
    """Short delays and timeouts, so a reconnect takes milliseconds, not seconds."""
    values: dict[str, Any] = {
        "url": url,
        "dialect": dialect,
        "reconnect": ReconnectPolicy(initial_delay_s=0.02, max_delay_s=0.1),
        "heartbeat": HeartbeatConfig(ping_interval_s=0.5, ping_timeout_s=3.0),
        "ack_timeout_s": 3.0,
        "close_timeout_s": 1.0,
    }
    values.update(overrides)
    return SessionConfig(**values)


class EventLog(list[SessionEvent]):
    def states(self) -> list[str]:
        return [str(e.details["state"]) for e in self if e.kind == "state"]

    def of(self, kind: str) -> list[SessionEvent]:
        return [e for e in self if e.kind == kind]

    def entered(self, state: str) -> list[SessionEvent]:
        return [e for e in self if e.kind == "state" and e.details["state"] == state]


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.005)


def sim_seq(payload: bytes) -> int:
    return int(orjson.loads(payload)["sim_seq"])


def seqs(sink: RecordingSink, topic: str) -> list[int]:
    return [sim_seq(m[2]) for m in sink.messages(topic)]


def counts(sink: RecordingSink, topics: list[str]) -> Callable[[int], bool]:
    """A predicate: every topic has at least n messages in the sink."""
    return lambda n: all(len(sink.messages(t)) >= n for t in topics)


def check_order(sink: RecordingSink, topics: list[str]) -> int:
    """Every topic's sim_seq strictly increases (nothing twice, nothing reordered) and steps
    by exactly one except across a gap mark. Returns how many gap marks there were."""
    last: dict[str, int] = {}
    gap_since: set[str] = set()
    gaps = 0
    for entry in sink.entries():
        if isinstance(entry, GapMark):
            gaps += 1
            gap_since = set(topics)
            continue
        topic, seq = entry[1], sim_seq(entry[2])
        if topic in last:
            assert seq > last[topic], f"{topic}: {seq} after {last[topic]}"
            if topic not in gap_since:
                assert seq == last[topic] + 1, f"{topic}: {seq} after {last[topic]}, no gap"
        gap_since.discard(topic)
        last[topic] = seq
    return gaps


def no_session_tasks() -> bool:
    return not [t for t in asyncio.all_tasks() if t.get_name().startswith("wsgw-session")]


@asynccontextmanager
async def running(
    config: SessionConfig, topics: list[str], session_id: int = 1
) -> AsyncIterator[tuple[UpstreamSession, RecordingSink, EventLog]]:
    """A started session; stopped afterwards, with no task of it left behind."""
    sink = RecordingSink()
    events = EventLog()
    session = UpstreamSession(session_id, config, sink, on_event=events.append, topics=topics)
    session.start()
    try:
        yield session, sink, events
    finally:
        await session.stop()
        assert session.state in (State.STOPPED, State.FAILED)
        assert no_session_tasks()
