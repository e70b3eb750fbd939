"""Property-based tests of the whole API from its OpenAPI document (schemathesis).

The app runs on a SQLite file and a built sysfs tree (the host routes can bind and set
hugepages all they like: nothing real is touched), with a token holding both scopes.
Checks: no 5xx, status codes, content types and bodies as the document says; data the
document calls valid is accepted and data it calls invalid refused (ST202/ST201), but for
the rules between fields that JSON Schema cannot state (CROSS_FIELD_RULES); a request
without the token is refused (ignored_auth).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.transport import Response
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from api.app import create_app
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, make_settings
from tests.host.fakesys import FakeHost

#: Rules between fields (or against stored state: a CA file on the host, the session's
#: dialect) that a schema-valid body can break: 422 naming one of these fields is right
#: for schema-valid data, and only these. The schemas' docstrings state each rule.
CROSS_FIELD_RULES = {
    "POST /v1/ports": {"ipv4", "gateway"},
    "PATCH /v1/ports/{port_id}": {"ipv4", "gateway"},
    "POST /v1/sessions": {
        "url",  # an IPv4 host the session's port cannot route
        "port_id",
        "tls_ca_file",
        "tls_server_name",
        "heartbeat_timeout_s",
        "reconnect_max_delay_s",
    },
    "PATCH /v1/sessions/{session_id}": {
        "url",
        "port_id",
        "tls_ca_file",
        "tls_server_name",
        "heartbeat_timeout_s",
        "reconnect_max_delay_s",
        "dialect",
    },
    "POST /v1/groups": {"legs"},  # existing sessions, one dialect, one group each
    "PATCH /v1/groups/{group_id}": {"legs"},
    "GET /v1/history": {"since"},  # before until
    "POST /v1/subscriptions": {"topics"},
    "PATCH /v1/subscriptions/{subscription_id}": {"topics"},
}


def positive_data_acceptance_but_cross_field_rules(
    ctx: CheckContext, response: Response, case: schemathesis.Case
) -> bool | None:
    """positive_data_acceptance, with a 422 allowed when every issue names a field of a
    rule in CROSS_FIELD_RULES for this operation."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code != 422:
            raise
        allowed = CROSS_FIELD_RULES.get(case.operation.label, set())
        issues = response.json()["detail"]
        if not all(len(i["loc"]) == 2 and i["loc"][1] in allowed for i in issues):
            raise
        return None


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    positive_data_acceptance_but_cross_field_rules,
    negative_data_rejection,
    ignored_auth,
]
_headers: dict[str, str] = {}


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[schemathesis.BaseSchema]:
    root: Path = tmp_path_factory.mktemp("schemathesis")
    host = FakeHost(root / "host")
    host.add_nic("0000:03:00.0", ifname="ens3")
    host.add_nic(
        "0000:00:03.0", 0x1AF4, 0x1041, "virtio-pci", "eth0", up=True,
        addresses=["192.0.2.2/24"], routes=["default"],
    )  # fmt: skip
    # schemathesis' ASGI client sends Host: testserver. ignored_auth sends a bad token to
    # every operation: the failed-auth limit (tests/api/test_security.py) is kept out of
    # the way, or its 429 would answer in place of the 401 the check looks for.
    settings_ = make_settings(
        root,
        f"sqlite:///{root / 'state/wsgw.db'}",
        api={"allowed_hosts": ["testserver"]},
        auth={"failure_limit": 100_000},
    )
    app = create_app(settings_, DetachedRuntime(), host=host.manager())
    with TestClient(app, base_url=BASE_URL):  # runs the lifespan: migrations, restore
        _, secret = app.state.control.tokens.create("fuzz", ["admin", "consume"])
        _headers["Authorization"] = f"Bearer {secret}"
        port = app.state.control.ports.create(
            {"name": "p", "device": "net_tap0", "ipv4": "198.18.0.2", "netmask": "255.255.255.0"}
        )
        session = app.state.control.sessions.create(
            {"name": "s", "url": "wss://x.example/", "dialect": "generic", "transport": "dpdk",
             "port_id": port.id}
        )  # fmt: skip
        app.state.control.subscriptions.create(
            {"session_id": session.id, "topics": ["t"], "consumer": "c"}
        )
        yield schemathesis.openapi.from_asgi("/openapi.json", app)


# schemathesis' pytest integration (parametrize/from_fixture) reads a pytest attribute that
# pytest 9 removed, so the operations are driven here with hypothesis directly, one
# subtest per operation and generation mode.
MODES = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]


def test_api_conforms_to_its_schema(
    api_schema: schemathesis.BaseSchema, subtests: pytest.Subtests
) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) > 25
    for operation in operations:
        for mode in MODES:
            with subtests.test(msg=f"{operation.label} [{mode.value}]"):

                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(
                    max_examples=10,
                    deadline=None,
                    derandomize=True,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )
                def run(case: schemathesis.Case) -> None:
                    case.call_and_validate(headers=_headers, checks=CHECKS)

                try:
                    run()
                except Unsatisfiable:
                    # No parameters and no body: nothing to make invalid.
                    assert mode is GenerationMode.NEGATIVE


def test_api_coverage_phase(api_schema: schemathesis.BaseSchema, subtests: pytest.Subtests) -> None:
    """schemathesis' coverage phase: each constraint of the document at its edges, valid
    and not, and every method a path does not declare (405 with Allow, RFC 9110 section
    15.5.6; OPTIONS lists the path's methods, section 9.3.7)."""
    checks = [*CHECKS, unsupported_method, allow_header_conformance]
    for result in api_schema.get_all_operations():
        operation = result.ok()
        config = api_schema.config.generation_for(operation=operation, phase="coverage")
        with subtests.test(msg=f"{operation.label} [coverage]"):
            cases = api_schema.iter_coverage_cases(
                operation, generation_modes=MODES, generation_config=config
            )
            for case in cases:
                case.call_and_validate(headers=_headers, checks=checks)
