"""/v1/engine: the dataplane engine's configuration (the latency profile and what it set)
and its state (admin). The profile is a start-up setting: it is read here, never changed."""

from __future__ import annotations

from api.deps import AdminDep, ControlDep, SettingsDep
from api.routes import resource_router
from api.schemas.engine import EngineConfigPublic

router = resource_router("/v1/engine", "engine")


@router.get("", response_model=EngineConfigPublic)
def get_engine(control: ControlDep, settings: SettingsDep, _: AdminDep) -> EngineConfigPublic:
    """The latency profile, the engine knobs it decides and the engine's state."""
    status = control.runtime.engine_status()
    return EngineConfigPublic(
        latency_profile=settings.latency_profile,
        poll_mode=settings.engine.poll_mode,
        cpu=settings.engine.cpu,
        budget_us=settings.engine.budget_us,
        reader_wait=settings.hub.reader_wait or "futex",
        state=str(status.state),
        reason=status.reason,
        details=dict(status.details),
    )
