"""deploy/verify-build.sh: the Dockerfile's build stage replayed on this machine (no
container engine runs here), the runtime stage's inputs checked, `wsgw serve` probed with the
image's HEALTHCHECK. About a minute: `pip install .` compiles the shim in a fresh venv."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.deploy.helpers import DEPLOY, run

SCRIPT = DEPLOY / "verify-build.sh"
NEEDED = ("/usr/bin/python3", "apt-cache", "dpkg-query", "ldd", "pkg-config")
EXPECTED_CHECKS = {
    "apt-packages-known",
    "build-packages-installed",
    "build-stage",
    "runtime-copy-from-build",
    "runtime-entrypoint",
    "runtime-shim-libraries",
    "runtime-pmds",
    "shim-info-dpdk",
    "serve-healthcheck",
    "serve-readyz",
    "serve-sigterm",
}


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_dockerfile_build_steps_work_here() -> None:
    for tool in NEEDED:
        if not (Path(tool).exists() if tool.startswith("/") else shutil.which(tool)):
            pytest.skip(f"{tool} is missing: this is not a Debian machine with `make deps` done")
    proc = run(["bash", str(SCRIPT)], timeout=400)
    assert proc.stdout.strip(), f"no summary; stderr:\n{proc.stderr[-3000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    failed = [f"{c['name']}: {c['detail']}" for c in summary["checks"] if not c["ok"]]
    assert not failed, "\n".join(failed) + "\n\n" + proc.stderr[-3000:]
    assert proc.returncode == 0
    names = {c["name"] for c in summary["checks"]}
    assert names >= EXPECTED_CHECKS, EXPECTED_CHECKS - names
    info = summary["shim_info"]
    assert info["dpdk"] is True and info["dpdk_version"].startswith("DPDK ")
    assert "/opt/wsgw/venv/" in info["path"], "the shim inside the replayed image venv"
