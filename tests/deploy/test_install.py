"""`pip install` of the checkout (not editable) into a fresh virtualenv outside it works on
its own: the wheel holds the shim library and the migrations and leaves the benchmarks and
the test support out, and from a folder that is not the checkout `wsgw db upgrade` migrates
a new SQLite database, `wsgw serve` (its hub's ring is the shim's) answers /healthz and
stops on SIGTERM, the installed `wsgw shim info` loads the library from site-packages, and
`import gateway` imports nothing from `api`.

The new virtualenv gets the dependencies from this interpreter's site-packages (a .pth
file): nothing is downloaded. The wheel is built from a copy of the checkout's files, so
the build leaves nothing in the checkout; everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.helpers import REPO, run
from wsgw_bench.servers import free_port

# The wheel build compiles the shim: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: What must not be in the wheel: the benchmarks and what only tests and benchmarks use.
NOT_SHIPPED = ("wsgw_bench/", "tests/", "gateway/bench/", "gateway/hub/testing.py")


@dataclass
class Installed:
    venv: Path
    wheel: Path
    cwd: Path  # an empty folder outside the checkout

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def wsgw(self) -> Path:
        return self.venv / "bin" / "wsgw"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user of the installed package: no WSGW_* settings and no
        PYTHONPATH from the test run."""
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("WSGW_") and k != "PYTHONPATH"
        }
        env["PYTHONNOUSERSITE"] = "1"
        env.update(extra)
        return env

    def python_prints(self, code: str) -> str:
        """Run `code` in the installed Python, as a user would, from outside the checkout:
        it must succeed. What it printed."""
        proc = run([str(self.python), "-c", code], cwd=self.cwd, env=self.env())
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


def _checkout_files() -> list[str]:
    """The checkout's files as git sees them (tracked and new, ignored ones left out)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout to list the sources")
    proc = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return [name for name in proc.stdout.split("\0") if name and (REPO / name).is_file()]


def _copy_checkout(dest: Path) -> None:
    for name in _checkout_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    with tempfile.TemporaryDirectory(prefix="wsgw-install-") as tmp:
        root = Path(tmp)
        source, dist, venv, cwd = root / "src", root / "dist", root / "venv", root / "cwd"
        cwd.mkdir()
        _copy_checkout(source)
        proc = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
        assert proc.returncode == 0, proc.stderr
        python = venv / "bin" / "python"
        purelib = run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
        # This interpreter's packages (pip, setuptools, the dependencies) after the venv's own.
        Path(purelib, "zz-wsgw-test-deps.pth").write_text(
            "\n".join(site.getsitepackages()) + "\n", encoding="utf-8"
        )
        installer = Installed(venv, dist, cwd)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
        proc = run(
            [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)],
            cwd=cwd,
            env=installer.env(),
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        (wheel,) = dist.glob("wsgw-*.whl")
        installer.wheel = wheel
        proc = run(
            [*pip, "install", "--no-deps", "--no-index", str(wheel)],
            cwd=cwd,
            env=installer.env(),
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        yield installer


def test_the_wheel_holds_the_shim_and_the_migrations_and_no_bench(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
    shipped = [n for n in names if n.startswith(NOT_SHIPPED)]
    assert not shipped, f"the wheel ships bench or test support: {shipped[:10]}"
    for needed in (
        "dataplane/shim/libwsgw_shim.so",
        "gateway/store/migrations/env.py",
        "gateway/store/migrations/script.py.mako",
        "api/static/index.html",
    ):
        assert needed in names, f"the wheel lacks {needed}"
    assert any(n.startswith("gateway/store/migrations/versions/0001_") for n in names)
    top_level = {n.split("/", 1)[0] for n in names if not n.startswith("wsgw-")}
    assert top_level == {"gateway", "dataplane", "api"}


def test_the_installed_package_is_the_one_imported(installed: Installed) -> None:
    code = (
        "import sys, gateway, dataplane, api;"
        "print(gateway.__file__); print(dataplane.__file__); print(api.__file__)"
    )
    printed = installed.python_prints(code)
    for path in printed.split():
        assert Path(path).is_relative_to(installed.venv), path


def test_import_gateway_imports_nothing_from_api(installed: Installed) -> None:
    code = (
        "import sys, gateway;"
        "print(sorted(m for m in sys.modules if m == 'api' or m.startswith('api.')))"
    )
    printed = installed.python_prints(code)
    assert printed.strip() == "[]", printed


def test_shim_info_loads_the_installed_library(installed: Installed) -> None:
    proc = run([str(installed.wsgw), "shim", "info"], cwd=installed.cwd, env=installed.env())
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert Path(info["path"]).is_relative_to(installed.venv), info["path"]
    assert Path(info["path"]).name == "libwsgw_shim.so"


def test_bench_says_where_it_comes_from(installed: Installed) -> None:
    proc = run([str(installed.wsgw), "bench", "--list"], cwd=installed.cwd, env=installed.env())
    assert proc.returncode == 2
    assert "source checkout" in proc.stderr


def test_db_upgrade_then_serve_answers_healthz(installed: Installed) -> None:
    state = installed.cwd / "state"
    state.mkdir()
    port = free_port()
    # The hub's ring is the shim's: serving proves the installed library loads. A small one
    # under a name of this test's own, which the gateway removes at stop (and the test too).
    gateway = f"wsgw-install-{os.getpid()}"
    ring = Path("/dev/shm") / f"wsgw-{gateway}-messages"
    env = installed.env(
        WSGW_STATE_DIR=str(state),
        WSGW_DB__URL=f"sqlite:///{state / 'gateway.db'}",
        WSGW_HUB__GATEWAY=gateway,
        WSGW_HUB__RING_CAPACITY=str(1 << 16),
    )
    proc = run([str(installed.wsgw), "db", "upgrade"], cwd=installed.cwd, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "empty ->" in proc.stdout and "-> None" not in proc.stdout, proc.stdout

    log = installed.cwd / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(installed.wsgw), "serve", "--no-auth", "--port", str(port), "--text-logs"],
            cwd=installed.cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        health = _get_when_up(f"http://127.0.0.1:{port}/healthz", server, timeout=90)
        assert health["status"] == "ok", health
        assert ring.exists(), "the hub made no ring"
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0, log.read_text(errors="replace")[-3000:]
        assert not ring.exists(), "the gateway left its ring behind"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
        ring.unlink(missing_ok=True)


def _get_when_up(url: str, server: subprocess.Popen[bytes], timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            pytest.fail(f"wsgw serve exited with {server.returncode} before it answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body: dict[str, object] = json.loads(response.read())
                return body
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                pytest.fail(f"{url} did not answer within {timeout} s")
            time.sleep(0.2)
