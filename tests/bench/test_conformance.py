"""`wsgw bench conformance`'s grading and isolation: every verdict counted on its own
(NON-STRICT and INFORMATIONAL are not passes), and runs that can coexist (a free port for
each fuzzingserver, a lab name of each run's own)."""

from __future__ import annotations

import socket
import threading
from contextlib import closing

import pytest

from dataplane.transports.kernel import connect_kernel
from gateway.lab import Lab
from wsgw_bench.conformance import CaseVerdict, Grade, run_suite
from wsgw_bench.core import BenchOptions, unique_lab_name


def verdict(case: str, behavior: str, close: str = "OK") -> CaseVerdict:
    return CaseVerdict(case, behavior, close, "result", "result close", 1)


def test_every_verdict_is_counted_apart() -> None:
    grade = Grade(
        (
            verdict("1.1.1", "OK"),
            verdict("3.2", "NON-STRICT"),
            verdict("7.1.6", "INFORMATIONAL", "INFORMATIONAL"),
            verdict("12.1.1", "UNIMPLEMENTED"),
            verdict("5.1", "FAILED"),
            verdict("7.3.1", "OK", "WRONG CODE"),
            verdict("7.1.1", "OK", "UNCLEAN"),
            verdict("9.1.1", "ERROR", "FAILED BY CLIENT"),
        )
    )
    assert grade.behavior == {
        "OK": 3,
        "NON-STRICT": 1,
        "INFORMATIONAL": 1,
        "UNIMPLEMENTED": 1,
        "FAILED": 1,
        "ERROR": 1,
    }
    assert grade.close == {
        "OK": 4,
        "INFORMATIONAL": 1,
        "WRONG CODE": 1,
        "UNCLEAN": 1,
        "FAILED BY CLIENT": 1,
    }
    assert [v.case for v in grade.failed] == ["5.1", "7.3.1", "7.1.1", "9.1.1"]
    assert [v.case for v in grade.non_strict] == ["3.2"]
    assert [v.case for v in grade.unimplemented] == ["12.1.1"]
    assert [v.case for v in grade.informational] == ["7.1.6"]
    assert not grade.conformant
    problems = grade.problems().splitlines()
    assert len(problems) == 6 and problems[0].startswith("FAILED 5.1: FAILED/OK")
    assert "NON-STRICT 3.2: NON-STRICT/OK (result result close)" in problems
    assert "behavior ERROR 1, FAILED 1" in grade.summary()


@pytest.mark.parametrize("bad", ["NON-STRICT", "UNIMPLEMENTED", "FAILED"])
def test_conformant_means_ok_or_informational_only(bad: str) -> None:
    fine = (verdict("1.1.1", "OK"), verdict("7.13.1", "INFORMATIONAL", "INFORMATIONAL"))
    assert Grade(fine).conformant and Grade(fine).problems() == ""
    assert not Grade((*fine, verdict("6.4.3", bad))).conformant


def test_lab_name_is_the_runs_own_unless_chosen() -> None:
    names = {unique_lab_name(BenchOptions(), "conf") for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert Lab(name).name == name  # a valid lab name (checked by Lab)
        assert name.startswith("conf") and name != BenchOptions().lab_name
    assert unique_lab_name(BenchOptions(lab_name="mine"), "conf") == "mine"


@pytest.mark.slow
def test_two_runs_at_once_each_get_a_free_port() -> None:
    """Two fuzzingservers side by side, while the port they used to share (9001) is taken:
    each binds a port of its own and grades its client."""
    grades: list[Grade] = []
    errors: list[BaseException] = []

    def one_run() -> None:
        try:
            grades.append(run_suite(None, ["1.1.1", "2.1"], "127.0.0.1", connect_kernel))
        except BaseException as exc:
            errors.append(exc)

    with closing(socket.socket()) as squatter:
        try:
            squatter.bind(("127.0.0.1", 9001))
            squatter.listen()
        except OSError:
            pass  # taken already: the point stands
        runs = [threading.Thread(target=one_run) for _ in range(2)]
        for run in runs:
            run.start()
        for run in runs:
            run.join(120)
    assert not errors, errors
    assert len(grades) == 2
    for grade in grades:
        assert [v.case for v in grade.verdicts] == ["1.1.1", "2.1"]
        assert grade.conformant, grade.problems()
