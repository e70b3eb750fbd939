"""deploy/systemd: `systemd-analyze verify` and `security` on the unit (under a temporary root
that holds the system's units and a stand-in ExecStart), the sysusers/tmpfiles companions with
their own tools, and the keys a DPDK service needs, read with a parser that always runs."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.deploy.helpers import (
    DEPLOY,
    DPDK_CAPABILITIES,
    load_settings,
    parse_dockerfile,
    require_tool,
    run,
)

SYSTEMD = DEPLOY / "systemd"
UNIT = SYSTEMD / "wsgw.service"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
#: Options that break DPDK or the gateway (the unit says why, at the end of [Service]).
FORBIDDEN = {
    "PrivateDevices": "yes",
    "PrivateNetwork": "yes",
    "PrivateUsers": "yes",
    "MemoryDenyWriteExecute": "yes",
    "RestrictRealtime": "yes",
    "ProcSubset": "pid",
    "PrivateIPC": "yes",
    "RemoveIPC": "yes",
}


def unit_sections(path: Path) -> dict[str, dict[str, list[str]]]:
    """[Section] -> key -> values; systemd allows a key many times (configparser does not)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"{path.name}:{number}: {raw!r}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    return unit_sections(UNIT)


def exec_start(unit: dict[str, dict[str, list[str]]]) -> list[str]:
    (command,) = unit["Service"]["ExecStart"]
    return shlex.split(command)


@pytest.fixture
def fake_root(tmp_path: Path, unit: dict[str, dict[str, list[str]]]) -> Path:
    """A root for systemd-analyze: the system's unit files, ours, and an executable where
    ExecStart points (the venv is not installed here)."""
    if not SYSTEM_UNITS.is_dir():
        pytest.skip(f"{SYSTEM_UNITS} is missing")
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system" / UNIT.name)
    binary = root / exec_start(unit)[0].lstrip("/")
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    return root


def test_systemd_analyze_verify(fake_root: Path) -> None:
    analyze = require_tool("systemd-analyze", "Debian systemd")
    proc = run([analyze, "verify", "--man=no", f"--root={fake_root}", UNIT.name])
    # Unknown keys and bad values are only warnings (exit 0): any output is a failure.
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), (
        proc.stdout + proc.stderr
    )


def test_systemd_analyze_verify_catches_mistakes(fake_root: Path) -> None:
    analyze = require_tool("systemd-analyze", "Debian systemd")
    broken = fake_root / "etc/systemd/system/broken.service"
    broken.write_text(UNIT.read_text().replace("CPUAffinity=", "CPUAfinity="))
    proc = run([analyze, "verify", "--man=no", f"--root={fake_root}", broken.name])
    assert "CPUAfinity" in proc.stderr


def test_systemd_analyze_security_exposure(fake_root: Path) -> None:
    analyze = require_tool("systemd-analyze", "Debian systemd")
    proc = run([analyze, "security", "--offline=yes", f"--root={fake_root}", UNIT.name])
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert match, proc.stdout[-500:]
    assert float(match.group(1)) <= 4.0, f"exposure {match.group(1)} (was 2.9: 'OK')"


def test_dependencies_and_restart(unit: dict[str, dict[str, list[str]]]) -> None:
    section = unit["Unit"]
    assert "dev-hugepages.mount" in " ".join(section["Requires"]).split()
    assert "dev-hugepages.mount" in " ".join(section["After"]).split()
    service = unit["Service"]
    assert service["Restart"] == ["on-failure"]
    assert re.fullmatch(r"\d+s?", service["RestartSec"][0])
    assert service["LimitMEMLOCK"] == ["infinity"]
    assert service["CPUAffinity"][0].strip()
    assert service["EnvironmentFile"], "secrets come from an EnvironmentFile"
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_exec_start_is_the_images_entrypoint(unit: dict[str, dict[str, list[str]]]) -> None:
    """Bare metal installs the venv where the image has it, and runs the same command."""
    runtime = parse_dockerfile(DEPLOY / "Dockerfile").stage("runtime")
    venv = runtime.env()["VIRTUAL_ENV"]
    assert exec_start(unit) == [f"{venv}/bin/wsgw", "serve"]


def test_capabilities_and_user(unit: dict[str, dict[str, list[str]]]) -> None:
    service = unit["Service"]
    assert service["User"] == ["wsgw"], "not root: the capabilities come as ambient ones"
    ambient = {c.removeprefix("CAP_") for c in " ".join(service["AmbientCapabilities"]).split()}
    bounding = {c.removeprefix("CAP_") for c in " ".join(service["CapabilityBoundingSet"]).split()}
    assert ambient == bounding == DPDK_CAPABILITIES


def test_hardening_that_keeps_dpdk_working(unit: dict[str, dict[str, list[str]]]) -> None:
    service = unit["Service"]
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "ProtectKernelModules"):
        assert service[key] == ["yes"], key
    assert service["ProtectSystem"] == ["strict"]
    families = " ".join(service["RestrictAddressFamilies"]).split()
    assert "AF_PACKET" in families, "net_af_packet needs AF_PACKET sockets"
    filters = " ".join(service["SystemCallFilter"]).split()
    assert "@raw-io" in filters, "iopl/ioperm for PMDs that use port I/O"
    for key, value in FORBIDDEN.items():
        assert value not in service.get(key, []), f"{key}={value} breaks DPDK"
        assert re.search(rf"^#\s+{key}=", UNIT.read_text(), re.MULTILINE), (
            f"say in the unit why {key} is off"
        )


def test_environment_is_valid_gateway_settings(unit: dict[str, dict[str, list[str]]]) -> None:
    env: dict[str, str] = {}
    for item in unit["Service"].get("Environment", []):
        for word in shlex.split(item):
            name, _, value = word.partition("=")
            env[name] = value
    for raw in (SYSTEMD / "wsgw.env.example").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        # EnvironmentFile quoting: a value that starts with a quote is taken literally inside.
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[name] = value
    settings = load_settings({k: v for k, v in env.items() if k.startswith("WSGW_")})
    assert settings["api"]["host"] == "127.0.0.1"
    assert settings["host"]["allow_changes"] is False, "not root: no host changes"
    assert settings["dpdk"]["pci_allow"] == ["0000:03:00.0"]
    lcores = settings["dpdk"]["lcores"]
    cpus = {int(c) for c in unit["Service"]["CPUAffinity"][0].split()}
    assert int(lcores.split("@")[1]) in cpus, "the lcore's CPU is one the unit may use"


def test_sysusers_and_tmpfiles(tmp_path: Path) -> None:
    sysusers = require_tool("systemd-sysusers", "Debian systemd")
    tmpfiles = require_tool("systemd-tmpfiles", "Debian systemd")
    (tmp_path / "etc").mkdir()
    hugepages = tmp_path / "dev/hugepages"
    hugepages.mkdir(parents=True)
    proc = run([sysusers, f"--root={tmp_path}", str(SYSTEMD / "wsgw.sysusers")])
    assert proc.returncode == 0, proc.stderr
    group = (tmp_path / "etc/group").read_text()
    gid = int(re.search(r"^wsgw:x:(\d+):", group, re.MULTILINE).group(1))  # type: ignore[union-attr]
    proc = run([tmpfiles, f"--root={tmp_path}", "--create", str(SYSTEMD / "wsgw.tmpfiles")])
    assert proc.returncode == 0, proc.stderr
    stat = hugepages.stat()
    assert stat.st_gid == gid and stat.st_mode & 0o7777 == 0o1770


def test_udev_rule_names_the_group() -> None:
    rules = (SYSTEMD / "90-wsgw-vfio.rules").read_text(encoding="utf-8")
    (rule,) = [line for line in rules.splitlines() if line and not line.startswith("#")]
    assert 'SUBSYSTEM=="vfio"' in rule and 'GROUP="wsgw"' in rule and 'MODE="0660"' in rule
    user = (SYSTEMD / "wsgw.sysusers").read_text(encoding="utf-8")
    assert re.search(r"^u\s+wsgw\s", user, re.MULTILINE)
