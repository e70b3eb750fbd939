"""wsgw_bench.wake: the haltpoll window it sets for a contender's turn comes back however the
turn ends, and a short alternated run measures every placement (figures not asserted)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wsgw_bench import wake


def test_the_halt_poll_window_is_put_back_even_when_the_turn_fails(tmp_path: Path) -> None:
    knob = tmp_path / "guest_halt_poll_ns"  # the sysfs file's format: a number and a newline
    knob.write_text("0\n")
    with wake.halt_poll_window(200_000, knob) as before:
        assert before == 0
        assert knob.read_text() == "200000\n"
    assert knob.read_text() == "0\n"
    seen = []

    def failing_turn() -> None:
        with wake.halt_poll_window(150_000, knob):
            seen.append(knob.read_text())
            raise RuntimeError("the turn failed")

    with pytest.raises(RuntimeError, match="the turn failed"):
        failing_turn()
    assert seen == ["150000\n"]
    assert knob.read_text() == "0\n"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_short_run_measures_each_placement(capsys: pytest.CaptureFixture[str]) -> None:
    wake.main(
        [
            "--rates",
            "2000",
            "--seconds",
            "0.3",
            "--rounds",
            "1",
            "--contenders",
            "same cpu;other cpu;other cpu, adaptive;same cpu, python client;"
            "same cpu, python client, wait then read",
        ]
    )
    medians = capsys.readouterr().out.split("medians:")[1]
    for name in ("same cpu", "other cpu", "other cpu, adaptive"):
        assert f"2000 msg/s {name} " in medians
    # the Python client, read and wait in one call or not, also says what its wake-up costs
    for name in ("same cpu, python client", "same cpu, python client, wait then read"):
        line = next(x for x in medians.splitlines() if f"2000 msg/s {name} " in x)
        assert "wake->code p50 " in line and "nan" not in line
