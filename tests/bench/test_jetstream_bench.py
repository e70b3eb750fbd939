"""`wsgw bench jetstream --quick`, one repetition: every contender produced a finite rate and
the stream held every message (the scenario raises otherwise). Never how fast."""

from __future__ import annotations

import math

import pytest

from wsgw_bench.core import SCENARIOS, BenchOptions
from wsgw_bench.servers import nats_server_binary


@pytest.mark.skipif(nats_server_binary() is None, reason="nats-server is not installed")
def test_the_jetstream_scenario_runs_every_contender() -> None:
    from wsgw_bench import cli

    cli._load_scenarios()
    results = SCENARIOS["jetstream"].run(BenchOptions(quick=True, repetitions=1))
    assert [m.contender for m in results] == [
        "no ids",
        "Wsgw headers, no ids",
        "ids: run+seq",
        "ids: trade id",
        "ids: trade id, no acks",
    ]
    for m in results:
        assert len(m.samples) == 1 and math.isfinite(m.samples[0]) and m.samples[0] > 0, m
