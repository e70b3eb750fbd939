"""`wsgw db ...`, `wsgw token ...` in process, and `wsgw serve` as a real process that
migrates, serves, and shuts down gracefully on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import app as CLI
from gateway.store import migrate
from wsgw_bench.servers import free_port

runner = CliRunner()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db_url: str) -> str:
    monkeypatch.setenv("WSGW_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("WSGW_DB__URL", db_url)
    return db_url


def test_db_upgrade_current_downgrade(env: str) -> None:
    result = runner.invoke(CLI, ["db", "current"])
    assert result.exit_code == 0, result.output
    assert "revision none (empty)" in result.output
    assert "needs `wsgw db upgrade`" in result.output
    result = runner.invoke(CLI, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert f"empty -> {migrate.head()}" in result.output
    assert "up to date" in runner.invoke(CLI, ["db", "current"]).output
    result = runner.invoke(CLI, ["db", "downgrade", "base"])
    assert result.exit_code == 0, result.output
    assert f"{migrate.head()} -> empty" in result.output


def test_token_create_list_revoke(env: str) -> None:
    result = runner.invoke(CLI, ["token", "create", "--name", "ops", "--scope", "admin"])
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip().splitlines()[-1]
    assert secret.startswith("wsgw_")
    assert "shown this once" in result.stderr

    listed = json.loads(runner.invoke(CLI, ["token", "list", "--json"]).stdout)
    assert [(t["name"], t["scopes"], t["revoked_at"]) for t in listed] == [("ops", ["admin"], None)]
    assert secret not in runner.invoke(CLI, ["token", "list"]).output

    result = runner.invoke(CLI, ["token", "revoke", "ops"])
    assert result.exit_code == 0, result.output
    assert "revoked" in result.output
    listed = json.loads(runner.invoke(CLI, ["token", "list", "--json"]).stdout)
    assert listed[0]["revoked_at"] is not None

    result = runner.invoke(CLI, ["token", "revoke", "nobody"])
    assert result.exit_code == 1
    assert "token 'nobody' not found" in result.stderr


def test_token_create_refuses_bad_input(env: str) -> None:
    result = runner.invoke(CLI, ["token", "create", "--name", "x", "--scope", "root"])
    assert result.exit_code == 2
    assert "scopes must be a non-empty subset of admin, consume" in result.stderr
    result = runner.invoke(CLI, ["token", "create", "--name", "a b", "--scope", "admin"])
    assert result.exit_code == 2


SERVE = "from gateway.cli import main; main()"


def serve_env(tmp_path: Path, db_url: str, **extra: str) -> dict[str, str]:
    """The environment of a `wsgw` subprocess: its own state, database, no config file, no
    host to look at (an empty sys root), plus `extra`."""
    return {
        **os.environ,
        "WSGW_STATE_DIR": str(tmp_path / "state"),
        "WSGW_DB__URL": db_url,
        "WSGW_CONFIG": str(tmp_path / "none.toml"),
        "WSGW_HOST__SYS_ROOT": str(tmp_path / "nosys"),
        **extra,
    }


def first_answer(proc: subprocess.Popen[str], url: str) -> httpx.Response:
    """GET `url` until the `wsgw serve` in `proc` answers (it must not exit meanwhile)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(url, timeout=1)
        except httpx.TransportError:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.1)


def stop_gracefully(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, as a service manager stops it; what it wrote to stderr."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=30)[1]


def kill_if_running(proc: subprocess.Popen[str]) -> bool:
    """The cleanup of a test that failed before the stop: whether it had to be killed."""
    if proc.poll() is not None:
        return False
    proc.kill()
    proc.communicate()
    return True


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def test_serve_migrates_serves_and_stops_gracefully(tmp_path: Path, sqlite_url: str) -> None:
    port = free_port()
    env = serve_env(tmp_path, sqlite_url, WSGW_HUB__GATEWAY=f"test{os.getpid()}")
    ring = Path(f"/dev/shm/wsgw-test{os.getpid()}-messages")
    made = subprocess.run(
        [sys.executable, "-c", SERVE, "token", "create", "-n", "ops", "-s", "admin"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    admin = {"Authorization": f"Bearer {made.stdout.strip()}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--port", str(port), "--json-logs"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        r = first_answer(proc, f"http://127.0.0.1:{port}/readyz")
        assert (r.status_code, r.json()) == (200, {"status": "ready"})  # nothing more
        r = httpx.get(f"http://127.0.0.1:{port}/readyz", headers=admin, timeout=5)
        engine = r.json()["engine"]
        assert engine["state"] == "running"  # the live runtime; no DPDK port opened yet
        assert "kernel transport only" in engine["reason"]
        assert ring.exists()  # the hub's shared-memory ring for local consumers
        assert httpx.get(f"http://127.0.0.1:{port}/v1/ports").status_code == 401
        err = stop_gracefully(proc)
    finally:
        if kill_if_running(proc):
            ring.unlink(missing_ok=True)  # a killed serve cannot unlink its ring
    assert proc.returncode == 0, err
    assert not ring.exists()  # the hub unlinks it on a graceful stop
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    messages = [line["msg"] for line in lines]
    assert any(f"upgrading to {migrate.head()}" in m for m in messages)
    assert any("shutting down: stopping sessions" in m for m in messages)
    assert messages[-1] == "control plane stopped"


def test_serve_refuses_no_auth_on_a_public_address(tmp_path: Path, sqlite_url: str) -> None:
    env = {
        **os.environ,
        "WSGW_STATE_DIR": str(tmp_path / "state"),
        "WSGW_DB__URL": sqlite_url,
        "WSGW_CONFIG": str(tmp_path / "none.toml"),
    }
    done = subprocess.run(
        [sys.executable, "-c", SERVE, "serve", "--no-auth", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "may only bind to a loopback address" in done.stderr
