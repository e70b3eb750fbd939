"""Feed groups (issue #19): sessions carrying the same stream (legs), arbitrated into one
stream the group publishes under its own hub id (gateway.groups.feed).

Rules (422 naming the field): a group has at least two legs, each an existing session,
all of one dialect, and a session is a leg of one group at most. A group is stored, so a
restart runs it again before its legs' sessions start (`restore`, from ControlPlane.start).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gateway.control.sessions import session_spec
from gateway.control.transactions import Transactions
from gateway.groups.feed import GroupSpec
from gateway.runtime import Runtime, RuntimeRefusedError
from gateway.store.errors import ConflictError, InvalidError
from gateway.store.models import FeedGroupLegRow, FeedGroupRow, SessionRow
from gateway.store.repository import Page, Repository, SessionRepository

log = logging.getLogger("wsgw.control")

MIN_LEGS = 2
MAX_LEGS = 8  # dataplane.arbiter.MAX_LEGS (checked in tests)


class GroupRepository(Repository[FeedGroupRow]):
    model = FeedGroupRow
    kind = "group"

    def by_name(self, name: str) -> FeedGroupRow | None:
        row: FeedGroupRow | None = self.session.scalar(
            select(FeedGroupRow).where(FeedGroupRow.name == name)
        )
        return row

    def group_of(self, session_ids: Sequence[int]) -> dict[int, int]:
        """session id -> the group it is a leg of, for those of session_ids that are legs."""
        rows = self.session.execute(
            select(FeedGroupLegRow.session_id, FeedGroupLegRow.group_id).where(
                FeedGroupLegRow.session_id.in_(session_ids)
            )
        )
        return {sid: gid for sid, gid in rows}


def group_spec(row: FeedGroupRow, dialect: str) -> GroupSpec:
    return GroupSpec(
        id=row.id,
        name=row.name,
        legs=tuple(leg.session_id for leg in row.legs),
        dialect=dialect,
        hold_ms=row.hold_ms,
    )


class GroupService:
    """Create, change and delete feed groups; a group runs in the runtime when it can."""

    def __init__(self, tx: Transactions, runtime: Runtime) -> None:
        self.tx = tx
        self.runtime = runtime
        #: Called after a change with the sessions that joined or left a group (the books
        #: of a leg are read from its group's stream).
        self.on_legs_change: list[Callable[[list[int]], None]] = []

    def _legs_changed(self, session_ids: list[int]) -> None:
        for callback in self.on_legs_change:
            callback(session_ids)

    def page(self, offset: int, limit: int) -> Page[FeedGroupRow]:
        return self.tx.read(lambda s: GroupRepository(s).page(offset, limit))

    def get(self, group_id: int) -> FeedGroupRow:
        return self.tx.read(lambda s: GroupRepository(s).get(group_id))

    def figures(self, group_id: int) -> dict[str, Any] | None:
        """The running group's figures (gateway.groups.feed.FeedGroup.figures), or None."""
        figures = getattr(self.runtime, "group_figures", None)
        return figures(group_id) if callable(figures) else None

    def create(self, values: Mapping[str, Any]) -> FeedGroupRow:
        with self.tx.write() as s:
            groups = GroupRepository(s)
            if groups.by_name(values["name"]) is not None:
                raise ConflictError(f"a group named {values['name']!r} exists: choose another")
            legs = self._check_legs(s, list(values["legs"]), None)
            row = FeedGroupRow(name=values["name"], hold_ms=values.get("hold_ms", 20))
            row.legs = [FeedGroupLegRow(session_id=r.id, position=i) for i, r in enumerate(legs)]
            groups.add(row)
            self._run(row, legs)
        self._legs_changed([r.id for r in legs])
        return row

    def update(self, group_id: int, values: Mapping[str, Any]) -> FeedGroupRow:
        with self.tx.write() as s:
            groups = GroupRepository(s)
            row = groups.get(group_id)
            name = values.get("name")
            if name is not None and name != row.name and groups.by_name(name) is not None:
                raise ConflictError(f"a group named {name!r} exists: choose another")
            wanted = values.get("legs")
            before = [leg.session_id for leg in row.legs]
            ids = list(wanted) if wanted is not None else before
            legs = self._check_legs(s, ids, row.id)
            if name is not None:
                row.name = name
            if values.get("hold_ms") is not None:
                row.hold_ms = values["hold_ms"]
            if wanted is not None:
                row.legs.clear()
                s.flush()  # the old legs out before the new ones (same keys)
                row.legs.extend(
                    FeedGroupLegRow(session_id=r.id, position=i) for i, r in enumerate(legs)
                )
            s.flush()
            self._run(row, legs)
        self._legs_changed(sorted({*before, *ids}))
        return row

    def delete(self, group_id: int) -> None:
        with self.tx.write() as s:
            groups = GroupRepository(s)
            row = groups.get(group_id)
            legs = [leg.session_id for leg in row.legs]
            groups.delete(row)
            remove = getattr(self.runtime, "remove_group", None)
            if callable(remove):
                remove(group_id)
        self._legs_changed(legs)

    def restore(self) -> list[int]:
        """Every stored group into the runtime (before the sessions start)."""
        restored: list[int] = []
        with self.tx.lock, self.tx.db.session() as s:
            sessions = SessionRepository(s)
            for row in GroupRepository(s).all():
                legs = [sessions.get(leg.session_id) for leg in row.legs]
                if len(legs) < MIN_LEGS:
                    log.warning("restore: group %s has %d leg(s): not run", row.id, len(legs))
                    continue
                try:
                    self._set_group(row, legs[0].dialect)
                    restored.append(row.id)
                except RuntimeRefusedError as exc:
                    log.error("restore: group %s (%s) refused: %s", row.id, row.name, exc)
        return restored

    # ---- rules -------------------------------------------------------------------------
    def _check_legs(self, s: Session, ids: list[int], group_id: int | None) -> list[SessionRow]:
        if len(ids) != len(set(ids)):
            raise InvalidError("a session is a leg of a group once", "legs")
        if not MIN_LEGS <= len(ids) <= MAX_LEGS:
            raise InvalidError(f"a group has {MIN_LEGS} to {MAX_LEGS} legs, not {len(ids)}", "legs")
        sessions = SessionRepository(s)
        rows: list[SessionRow] = []
        for sid in ids:
            row = sessions.find(sid)
            if row is None:
                raise InvalidError(f"session {sid} not found", "legs")
            rows.append(row)
        dialects = sorted({r.dialect for r in rows})
        if len(dialects) > 1:
            raise InvalidError(
                f"the legs of a group carry one stream: one dialect, not {', '.join(dialects)}",
                "legs",
            )
        taken = {
            sid: gid for sid, gid in GroupRepository(s).group_of(ids).items() if gid != group_id
        }
        if taken:
            sid, gid = next(iter(taken.items()))
            raise InvalidError(f"session {sid} is a leg of group {gid} already", "legs")
        return rows

    def _run(self, row: FeedGroupRow, legs: list[SessionRow]) -> None:
        """The group into the runtime; running DPDK legs restart, off the C feed path."""
        self._set_group(row, legs[0].dialect)
        for leg in legs:
            if leg.transport == "dpdk" and leg.desired_state == "running":
                self.runtime.stop_session(leg.id)
                self.runtime.start_session(session_spec(leg))

    def _set_group(self, row: FeedGroupRow, dialect: str) -> None:
        set_group = getattr(self.runtime, "set_group", None)
        if callable(set_group):
            set_group(group_spec(row, dialect))
