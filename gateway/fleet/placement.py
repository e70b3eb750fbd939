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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def matches(rule: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` may run a session with placement `rule`."""
    return all(labels.get(key) == value for key, value in rule.items())


def place(
    sessions: Mapping[int, Mapping[str, str]],
    nodes: Mapping[str, Mapping[str, str]],
    owners: Mapping[int, str],
) -> dict[int, str]:
    """session -> node for every session that has a node to go to. sessions: session id ->
    its rule; nodes: the live, non-draining nodes -> their labels; owners: session -> its
    current live owner. An owner that no longer matches or is gone loses the session; an
    owner loaded more than one above another eligible node gives sessions up (rebalance)."""
    load = {name: 0 for name in nodes}
    result: dict[int, str] = {}
    eligible = {
        sid: sorted(n for n in nodes if matches(rule, nodes[n])) for sid, rule in sessions.items()
    }
    for sid, owner in owners.items():
        if sid in sessions and owner in eligible[sid]:
            result[sid] = owner
            load[owner] += 1
    for sid in sorted(sessions):
        if sid in result or not eligible[sid]:
            continue
        chosen = min(eligible[sid], key=lambda n: (load[n], n))
        result[sid] = chosen
        load[chosen] += 1
    _rebalance(result, eligible, load)
    return result


def _rebalance(
    result: dict[int, str], eligible: Mapping[int, list[str]], load: dict[str, int]
) -> None:
    """Move one session at a time from a node to an eligible one with at least two fewer,
    until none can move. Each move lowers the sum of squared loads: it ends, and moves no
    session twice in a useful way. The newest session of the busiest node moves first."""
    while True:
        candidates = sorted(result, key=lambda sid: (-load[result[sid]], -sid))
        for sid in candidates:
            owner = result[sid]
            target = min(eligible[sid], key=lambda n: (load[n], n))
            if load[owner] - load[target] > 1:
                result[sid] = target
                load[owner] -= 1
                load[target] += 1
                break
        else:
            return


def unplaced(sessions: Iterable[int], placement: Mapping[int, str]) -> list[int]:
    """Sessions no node may run (their rule matches no live node)."""
    return sorted(sid for sid in sessions if sid not in placement)
