"""Processes and servers the tests and the benchmarks start, and always stop.

`NatsServer` runs the `nats-server` binary (Debian package nats-server) on a free loopback
port, JetStream optional, in a temporary folder it removes. `ServerThread` runs uvicorn with
an app on a loop of its own in a thread (the API thread of a gateway), on a free loopback
port. `free_port` finds such a port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- a throwaway PostgreSQL -------------------------------------------------------------------
PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (or no way to run initdb as a non-root user)."""


@dataclass
class PgServer:
    """A PostgreSQL cluster of our own in a temporary folder, on a free loopback port."""

    port: int
    admin_url: str
    stop_command: list[str] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the server (fast shutdown): the database goes away under its clients."""
        subprocess.run(self.stop_command, check=True, capture_output=True, timeout=60)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)


@contextlib.contextmanager
def postgres_server() -> Iterator[PgServer]:
    """initdb + pg_ctl start in a temporary folder on a free loopback port (as the postgres
    user when we are root: initdb refuses root), fsync off; stopped and removed afterwards,
    also on failure or an interrupt. PostgresUnavailable when it cannot run here."""
    bin_dir = next(
        (d for d in PG_BIN_DIRS if (d / "initdb").exists() and (d / "pg_ctl").exists()), None
    )
    if bin_dir is None:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found (apt-get install postgresql)"
        )
    as_user: list[str] = []
    owner: tuple[int, int] | None = None
    if os.geteuid() == 0:
        import pwd

        if shutil.which("runuser") is None:
            raise PostgresUnavailable("running as root without runuser: initdb refuses root")
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable("running as root and no 'postgres' user for initdb") from None
        as_user, owner = ["runuser", "-u", "postgres", "--"], (pw.pw_uid, pw.pw_gid)
    base = Path(tempfile.mkdtemp(prefix="wsgw-pg-"))
    if owner is not None:
        os.chown(base, *owner)
    data = base / "data"
    port = free_port()
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    pg_ctl = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data)]
    try:
        subprocess.run(
            [*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, env=env, timeout=120,
        )  # fmt: skip
        options = (
            f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        subprocess.run(
            [*pg_ctl, "-o", options, "-l", str(base / "log"), "-w", "-t", "60", "start"],
            check=True, capture_output=True, env=env, timeout=90,
        )  # fmt: skip
        yield PgServer(
            port,
            f"postgresql://postgres@127.0.0.1:{port}/postgres",
            [*pg_ctl, "-m", "fast", "-w", "stop"],
        )
    finally:
        # Whenever the data folder exists, not only with a postmaster.pid: an interrupt
        # (Ctrl-C) during `pg_ctl start` may land before the server has written it.
        if data.exists():
            subprocess.run(
                [*pg_ctl, "-m", "immediate", "stop"],
                capture_output=True, env=env, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)


def nats_server_binary() -> str | None:
    """The nats-server executable, or None (apt-get install nats-server)."""
    return shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if os.access("/usr/sbin/nats-server", os.X_OK) else None
    )


def stop_process(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM, and SIGKILL if it has not exited after `grace` seconds; returns once the
    process is reaped (no zombie left behind). A process already gone is only reaped."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_port(port: int, timeout: float, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout} s") from None
            time.sleep(0.02)


class NatsServer:
    """A nats-server of our own: `with NatsServer() as nats: connect to nats.url`."""

    def __init__(
        self,
        *,
        jetstream: bool = False,
        port: int | None = None,
        monitor: bool = False,
        config: str | None = None,
    ) -> None:
        """config: nats-server configuration text (e.g. `authorization { token: x }`,
        `ping_interval: "1s"`), written beside its data and passed with -c."""
        binary = nats_server_binary()
        if binary is None:
            raise FileNotFoundError("nats-server not found: apt-get install nats-server")
        self.binary = binary
        self.jetstream = jetstream
        self.port = port or free_port()
        #: The HTTP monitoring port (`-m`: /varz, /connz), when asked for.
        self.monitor_port = free_port() if monitor else None
        self.config = config
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="wsgw-nats-"))
        args = [self.binary, "-a", "127.0.0.1", "-p", str(self.port)]
        if self.jetstream:
            args += ["-js", "-sd", str(self.dir / "js")]
        if self.monitor_port is not None:
            args += ["-m", str(self.monitor_port)]
        if self.config is not None:
            conf = self.dir / "nats.conf"
            conf.write_text(self.config)
            args += ["-c", str(conf)]
        log = (self.dir / "nats.log").open("ab")
        try:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        try:
            wait_for_port(self.port, timeout)
        except TimeoutError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL); the folder stays until `cleanup`."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc, 5)

    def cleanup(self) -> None:
        self.stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    @property
    def log_text(self) -> str:
        path = self.dir / "nats.log" if self.dir else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class ServerThread:
    """uvicorn serving `app` from a thread of its own (its loop is `loop`)."""

    def __init__(
        self, app: Any, *, port: int | None = None, ws: str = "auto", uvloop: bool = False
    ) -> None:
        import uvicorn

        self.uvloop = uvloop  # run on uvloop (as `wsgw serve` does when it is installed)
        self.port = port or free_port()
        self.config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            ws=ws,
            log_level="warning",
            lifespan="on",
            ws_ping_interval=None,
        )
        self.server = uvicorn.Server(self.config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _run(self) -> None:
        if self.uvloop:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        else:
            loop = asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.serve())
        except BaseException as exc:
            self._error = exc
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def start(self, timeout: float = 20.0) -> ServerThread:
        self._thread = threading.Thread(target=self._run, name="wsgw-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"uvicorn did not start: {self._error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"uvicorn did not start within {timeout} s")
            time.sleep(0.01)
        return self

    def call(self, fn: Any, timeout: float = 10.0) -> Any:
        """Run fn() on the server's loop and return its result (for checks in tests)."""
        assert self.loop is not None
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            try:
                box.append((True, fn()))
            except BaseException as exc:
                box.append((False, exc))
            done.set()

        self.loop.call_soon_threadsafe(run)
        if not done.wait(timeout):
            raise TimeoutError("the server loop did not answer")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self, timeout: float = 20.0) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.server.force_exit = True
                self._thread.join(5)
            self._thread = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def gateway_app(
    state_dir: Path, hub: Any, *, auth: str = "token", latency_profile: str = "economical"
) -> Any:
    """A control plane app over `hub`, with its state (SQLite) in state_dir, no dataplane
    (DetachedRuntime) and host facts read from an empty tree; auth 'token' or 'none';
    latency_profile: what its /v1/stream hello says and recommends."""
    from api.app import create_app
    from gateway.runtime import DetachedRuntime
    from gateway.settings import Settings

    settings = Settings(
        state_dir=state_dir,
        db={"url": f"sqlite:///{state_dir / 'wsgw.db'}"},  # type: ignore[arg-type]
        host={"sys_root": state_dir / "sys", "proc_root": state_dir / "proc"},  # type: ignore[arg-type]
        auth={"mode": auth},  # type: ignore[arg-type]
        api={"host": "127.0.0.1"},  # type: ignore[arg-type]
        latency_profile=latency_profile,  # type: ignore[arg-type]
    )
    return create_app(settings, DetachedRuntime(), hub=hub)
