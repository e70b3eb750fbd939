"""Property-based tests of the whole API from its OpenAPI document (schemathesis).

The app runs on a SQLite file and a built sysfs tree (the host routes can bind and set
hugepages all they like: nothing real is touched), with a token holding both scopes.
Checks: no 5xx, status codes, content types and bodies as the document says.
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
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import create_app
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, make_settings
from tests.host.fakesys import FakeHost

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
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
    # schemathesis' ASGI client sends Host: testserver.
    settings_ = make_settings(
        root, f"sqlite:///{root / 'state/wsgw.db'}", api={"allowed_hosts": ["testserver"]}
    )
    app = create_app(settings_, DetachedRuntime(), host=host.manager())
    with TestClient(app, base_url=BASE_URL):  # runs the lifespan: migrations, restore
        _, secret = app.state.service.create_token("fuzz", ["admin", "consume"])
        _headers["Authorization"] = f"Bearer {secret}"
        port = app.state.service.create_port(
            {"name": "p", "device": "net_tap0", "ipv4": "198.18.0.2", "netmask": "255.255.255.0"}
        )
        session = app.state.service.create_session(
            {"name": "s", "url": "wss://x.example/", "dialect": "generic", "transport": "dpdk",
             "port_id": port.id}
        )  # fmt: skip
        app.state.service.create_subscription(
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
