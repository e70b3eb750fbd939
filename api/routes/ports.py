"""/v1/ports: the DPDK ports the dataplane opens (admin)."""

from __future__ import annotations

from fastapi import status

from api.deps import AdminDep, ControlDep, IdPath, PageDep
from api.routes import resource_router
from api.schemas.common import responses
from api.schemas.ports import (
    PortCreate,
    PortListPublic,
    PortPublic,
    PortStatusPublic,
    PortUpdate,
)
from gateway.control import ControlPlane
from gateway.store.models import PortRow

router = resource_router("/v1/ports", "ports")


def port_public(control: ControlPlane, port: PortRow) -> PortPublic:
    status_ = control.runtime.port_status(port.id)
    return PortPublic.model_validate(
        {
            **{k: getattr(port, k) for k in PortPublic.model_fields if k != "status"},
            "status": PortStatusPublic(state=str(status_.state), reason=status_.reason),
        }
    )


@router.get("", response_model=PortListPublic)
def list_ports(control: ControlDep, page: PageDep, _: AdminDep) -> PortListPublic:
    """Every configured port, oldest first."""
    result = control.ports.page(page.offset, page.limit)
    return page.of(PortListPublic, result, lambda p: port_public(control, p))


@router.post(
    "",
    response_model=PortPublic,
    status_code=status.HTTP_201_CREATED,
    responses=responses(409),
)
def create_port(body: PortCreate, control: ControlDep, _: AdminDep) -> PortPublic:
    """Configure a port; when enabled, the dataplane is asked to open it."""
    return port_public(control, control.ports.create(body.model_dump()))


@router.get("/{port_id}", response_model=PortPublic, responses=responses(404))
def get_port(port_id: IdPath, control: ControlDep, _: AdminDep) -> PortPublic:
    return port_public(control, control.ports.get(port_id))


@router.patch("/{port_id}", response_model=PortPublic, responses=responses(404, 409))
def update_port(port_id: IdPath, body: PortUpdate, control: ControlDep, _: AdminDep) -> PortPublic:
    """Change a port; an enabled port is reopened with the new settings."""
    return port_public(control, control.ports.update(port_id, body.model_dump(exclude_unset=True)))


@router.delete("/{port_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404, 409))
def delete_port(port_id: IdPath, control: ControlDep, _: AdminDep) -> None:
    """Remove a port no session uses; the dataplane closes it."""
    control.ports.delete(port_id)
