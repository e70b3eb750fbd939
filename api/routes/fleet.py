"""/v1/fleet: the fleet's nodes and session leases (admin), and draining this node (and
ending the drain).

Every node answers for the whole fleet: it reads the shared database. A gateway that is not
in a fleet (fleet.enabled false) answers 409.
"""

from __future__ import annotations

from collections import Counter

from api.deps import AdminDep, ControlDep
from api.routes import resource_router
from api.schemas.fleet import (
    DrainPublic,
    LeaseListPublic,
    LeasePublic,
    LegsTogetherPublic,
    NodeListPublic,
    NodePublic,
)
from gateway.control import ControlPlane
from gateway.fleet.node import FleetNode
from gateway.fleet.placement import together
from gateway.store.errors import ConflictError

router = resource_router("/v1/fleet", "fleet", 409)


def fleet_node(control: ControlPlane) -> FleetNode:
    node = getattr(control.runtime, "fleet", None)
    if not isinstance(node, FleetNode):
        raise ConflictError(
            "this gateway is not in a fleet: set fleet.enabled (and a PostgreSQL db.url "
            "shared by the nodes)"
        )
    return node


@router.get("/nodes", response_model=NodeListPublic)
def list_nodes(control: ControlDep, _: AdminDep) -> NodeListPublic:
    """Every node that registered, alive or not, with how many live leases it holds, and
    the feed groups whose legs share a node."""
    node = fleet_node(control)
    owners = {lease.session_id: lease.node for lease in node.leases.leases()}
    held = Counter(owners.values())
    return NodeListPublic(
        this_node=node.name,
        lease_s=node.settings.lease_s,
        data=[
            NodePublic.model_validate({**vars(n), "sessions": held.get(n.name, 0)})
            for n in node.leases.nodes()
        ],
        legs_together=[
            LegsTogetherPublic(group=group, legs=legs, nodes=sorted({owners[s] for s in legs}))
            for group, legs in sorted(together(owners, node.legs()).items())
        ],
    )


@router.get("/leases", response_model=LeaseListPublic)
def list_leases(control: ControlDep, _: AdminDep) -> LeaseListPublic:
    """Who runs each session: every lease row, expired ones marked not live."""
    node = fleet_node(control)
    live = {lease.session_id for lease in node.leases.leases()}
    return LeaseListPublic(
        data=[
            LeasePublic.model_validate({**vars(lease), "live": lease.session_id in live})
            for lease in node.leases.leases(live_only=False)
        ]
    )


@router.post("/drain", response_model=DrainPublic)
def drain(control: ControlDep, _: AdminDep) -> DrainPublic:
    """This node takes no new sessions and gives its sessions up one per tick, so the other
    nodes take them one by one: handed over make-before-break (the node the placement
    gives it connects it first and takes the lease over once it streams; this node runs
    it until then), or released at once where that cannot be (`generic` sessions, whose
    message ids differ between nodes). A restart of the node ends the drain."""
    node = fleet_node(control)
    held = node.drain()
    return DrainPublic(node=node.name, draining=True, held=sorted(held))


@router.post("/undrain", response_model=DrainPublic)
def undrain(control: ControlDep, _: AdminDep) -> DrainPublic:
    """This node takes sessions again (those placed on it from now on: nothing moves back
    by itself)."""
    node = fleet_node(control)
    held = node.drain(False)
    return DrainPublic(node=node.name, draining=False, held=sorted(held))
