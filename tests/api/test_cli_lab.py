"""`wsgw lab status -n X` for a lab that does not exist: a non-zero exit a script can test."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gateway.cli import app as CLI
from gateway.lab import list_labs
from tests.conftest import requires_root

runner = CliRunner()


def test_lab_status_of_a_missing_lab_exits_non_zero() -> None:
    name = "nolab9"
    assert name not in list_labs()
    result = runner.invoke(CLI, ["lab", "status", "-n", name])
    assert result.exit_code == 1, result.output
    assert f"no lab named '{name}'" in result.stderr
    assert result.stdout == ""


def test_lab_status_without_a_name_lists_the_present_labs() -> None:
    result = runner.invoke(CLI, ["lab", "status"])
    assert result.exit_code == 0, result.output
    assert all("up" in lab for lab in json.loads(result.stdout))  # others' labs come and go


@requires_root
def test_lab_up_with_a_jumbo_mtu_sets_it_and_says_so() -> None:
    name = "jmbcli"
    try:
        result = runner.invoke(CLI, ["lab", "up", "-n", name, "--mtu", "9000"])
        assert result.exit_code == 0, result.output
        status = json.loads(result.stdout)
        assert status["mtu"] == 9000 and "framesz=" in status["dpdk_vdev"]
    finally:
        runner.invoke(CLI, ["lab", "down", "-n", name])
    assert name not in list_labs()


def test_lab_up_refuses_an_mtu_below_ethernets() -> None:
    result = runner.invoke(CLI, ["lab", "up", "-n", "jmbbad", "--mtu", "1400"])
    assert result.exit_code == 2, result.output
    assert "mtu" in result.stderr
