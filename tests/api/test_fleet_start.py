"""A fleet started on SQLite (issue #20): `wsgw serve` with fleet.enabled and no db.url, or a
SQLite one, from the environment or the config file, stops at once with a message that says
what to do (exit 2), before it creates a database or binds a port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wsgw_bench.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "config"),
    [
        ({"WSGW_FLEET__ENABLED": "true"}, ""),
        ({"WSGW_FLEET__ENABLED": "true", "WSGW_DB__URL": "sqlite:///{state}/wsgw.db"}, ""),
        ({}, '[fleet]\nenabled = true\nnode = "n1"\n'),
    ],
    ids=["default-db", "sqlite-url", "config-file"],
)
def test_serve_refuses_a_fleet_on_sqlite(env: dict[str, str], config: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    config_file = tmp_path / "wsgw.toml"
    if config:
        config_file.write_text(config)
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--no-auth", "--port", str(port)],
        env={
            **os.environ,
            "WSGW_STATE_DIR": str(state),
            "WSGW_CONFIG": str(config_file),
            **{k: v.format(state=state) for k, v in env.items()},
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "fleet.enabled needs PostgreSQL" in done.stderr
    assert "postgresql+psycopg://" in done.stderr  # what to set instead
    assert "Traceback" not in done.stderr
    assert not (state / "wsgw.db").exists()
