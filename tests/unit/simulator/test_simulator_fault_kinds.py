"""The fault kinds for redundant-feed tests (#19): reset, skip, delay, and their text form."""

from __future__ import annotations

import pytest

from gateway.simulator import FAULT_KINDS, Fault, FaultError


def test_new_kinds_are_known() -> None:
    assert {"reset", "skip", "delay"} <= set(FAULT_KINDS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reset", Fault("reset")),
        ("skip:seq=42", Fault("skip", seq=42)),
        ("skip,after=5,count=3", Fault("skip", after=5, count=3)),
        ("skip:fraction=0.25", Fault("skip", fraction=0.25)),
        ("delay:ms=20", Fault("delay", seconds=0.02)),
        ("delay:us=500", Fault("delay", seconds=0.0005)),
        ("stall:ms=250", Fault("stall", seconds=0.25)),
        ("stall:seconds=2,ms=5", Fault("stall", seconds=2.0)),  # seconds wins
        ("unavailable:count=3", Fault("unavailable", count=3)),  # the books' faults (#21)
        ("nosnapshot,count=2", Fault("nosnapshot", count=2)),
        ("reorder:after=4", Fault("reorder", after=4)),
    ],
)
def test_parse(text: str, expected: Fault) -> None:
    assert Fault.parse(text) == expected
    assert Fault.parse(expected.describe()) == expected  # describe round-trips


@pytest.mark.parametrize(
    "text", ["skip:fraction=1.5", "skip:count=-1", "skip:seq=-2", "delay:ms=x", "delay:us=-1"]
)
def test_bad_options(text: str) -> None:
    with pytest.raises(FaultError):
        Fault.parse(text)


def test_from_mapping_takes_query_strings() -> None:
    fault = Fault.from_mapping({"kind": "skip", "fraction": "0.5", "target": "leg:A"})
    assert fault == Fault("skip", fraction=0.5)
