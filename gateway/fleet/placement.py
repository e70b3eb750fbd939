"""Where each session should run: a pure function every node computes alike.

A session's placement rule is a set of labels a node must carry (`{"dpdk": "true",
"venue": "binance"}`); among the live, non-draining nodes that match, a session without a
live owner goes to the one with the fewest sessions (counting what this placement gives
out), ties by name. Every node runs the same function over the same snapshot and acquires
only what it is given; when snapshots differ for a moment, PostgreSQL's lease row decides.

Sessions with a live owner stay where they are, unless the load is uneven by more than one
(a node joined, or came back after a failover): then the fewest sessions move, each from
the most loaded node to the least loaded one its rule allows, until no eligible pair of
nodes differs by more than one. The owner hands a moved session over gently, one per tick
(gateway.fleet.node), as a drain does.

Legs apart (issue #19 with #20): the legs of one feed group (`apart`: session -> group) go
to different nodes whenever enough eligible nodes exist, so a whole gateway can die while
another leg streams. A leg goes to the eligible node with the fewest legs of its group,
then the fewest sessions; an owner that shares a node with a leg of its group moves to an
eligible node with none (even when the load is even); a rebalancing move never puts two
legs of a group together. When fewer eligible nodes than legs exist, the legs share nodes
as evenly as the nodes allow (`together` names such groups): the group still arbitrates
on those nodes, but losing one of them loses the legs it ran.

Every step lowers (legs sharing a node, sum of squared loads) in that order, so the
placement ends, and every node computes the same one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def matches(rule: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` may run a session with placement `rule`."""
    return all(labels.get(key) == value for key, value in rule.items())


class _Legs:
    """How many legs of each group every node runs, as the placement is built."""

    def __init__(self, apart: Mapping[int, int]) -> None:
        self.apart = apart
        self.count: dict[tuple[int, str], int] = {}

    def siblings(self, sid: int, node: str, at: str | None = None) -> int:
        """Legs of `sid`'s group on `node`; `sid` itself (placed at `at`) not counted."""
        group = self.apart.get(sid)
        if group is None:
            return 0
        return self.count.get((group, node), 0) - (node == at)

    def move(self, sid: int, old: str | None, new: str) -> None:
        group = self.apart.get(sid)
        if group is None:
            return
        if old is not None:
            self.count[(group, old)] -= 1
        self.count[(group, new)] = self.count.get((group, new), 0) + 1


def place(
    sessions: Mapping[int, Mapping[str, str]],
    nodes: Mapping[str, Mapping[str, str]],
    owners: Mapping[int, str],
    apart: Mapping[int, int] | None = None,
) -> dict[int, str]:
    """session -> node for every session that has a node to go to. sessions: session id ->
    its rule; nodes: the live, non-draining nodes -> their labels; owners: session -> its
    current live owner; apart: session -> the feed group it is a leg of (module doc). An
    owner that no longer matches or is gone loses the session; an owner sharing its node
    with a leg of the same group, or loaded more than one above another eligible node,
    gives sessions up."""
    load = {name: 0 for name in nodes}
    legs = _Legs(apart or {})
    result: dict[int, str] = {}
    eligible = {
        sid: sorted(n for n in nodes if matches(rule, nodes[n])) for sid, rule in sessions.items()
    }
    for sid, owner in owners.items():
        if sid in sessions and owner in eligible[sid]:
            result[sid] = owner
            load[owner] += 1
            legs.move(sid, None, owner)
    for sid in sorted(sessions):
        if sid in result or not eligible[sid]:
            continue
        chosen = min(eligible[sid], key=lambda n: (legs.siblings(sid, n), load[n], n))
        result[sid] = chosen
        load[chosen] += 1
        legs.move(sid, None, chosen)
    while _spread(result, eligible, load, legs) | _rebalance(result, eligible, load, legs):
        pass  # a rebalancing move can let a leg spread again: until neither moves
    return result


def _move(result: dict[int, str], load: dict[str, int], legs: _Legs, sid: int, target: str) -> None:
    owner = result[sid]
    result[sid] = target
    load[owner] -= 1
    load[target] += 1
    legs.move(sid, owner, target)


def _spread(
    result: dict[int, str], eligible: Mapping[int, list[str]], load: dict[str, int], legs: _Legs
) -> bool:
    """Move a leg off a node it shares with a leg of its group, to the least loaded eligible
    node with fewer of them; each move lowers the number of legs sharing a node. Whether
    one moved."""
    moved, any_moved = True, False
    while moved:
        moved = False
        for sid in sorted(result, reverse=True):  # the newest leg of a pair moves
            owner = result[sid]
            here = legs.siblings(sid, owner, owner)
            if here == 0:
                continue
            target = min(eligible[sid], key=lambda n: (legs.siblings(sid, n, owner), load[n], n))
            if legs.siblings(sid, target, owner) < here:
                _move(result, load, legs, sid, target)
                moved = any_moved = True
    return any_moved


def _rebalance(
    result: dict[int, str], eligible: Mapping[int, list[str]], load: dict[str, int], legs: _Legs
) -> bool:
    """Move one session at a time from a node to an eligible one with at least two fewer
    (and no more legs of its group than where it is), until none can move. Each move lowers
    the sum of squared loads: it ends. The newest session of the busiest node moves first.
    Whether one moved."""
    moved = False
    while True:
        candidates = sorted(result, key=lambda sid: (-load[result[sid]], -sid))
        for sid in candidates:
            owner = result[sid]
            here = legs.siblings(sid, owner, owner)
            allowed = [n for n in eligible[sid] if legs.siblings(sid, n, owner) <= here]
            target = min(allowed, key=lambda n: (load[n], n))
            if load[owner] - load[target] > 1:
                _move(result, load, legs, sid, target)
                moved = True
                break
        else:
            return moved


def together(placement: Mapping[int, str], apart: Mapping[int, int]) -> dict[int, list[int]]:
    """group -> its legs that share a node with another of its legs (too few eligible
    nodes to put them apart)."""
    seen: dict[tuple[int, str], list[int]] = {}
    for sid, node in sorted(placement.items()):
        group = apart.get(sid)
        if group is not None:
            seen.setdefault((group, node), []).append(sid)
    shared: dict[int, list[int]] = {}
    for (group, _), sids in seen.items():
        if len(sids) > 1:
            shared.setdefault(group, []).extend(sids)
    return {group: sorted(sids) for group, sids in shared.items()}


def unplaced(sessions: Iterable[int], placement: Mapping[int, str]) -> list[int]:
    """Sessions no node may run (their rule matches no live node)."""
    return sorted(sid for sid in sessions if sid not in placement)
