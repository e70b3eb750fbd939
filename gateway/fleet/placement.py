"""Where each session should run: a pure function every node computes alike.

A session's placement rule is a set of labels a node must carry (`{"dpdk": "true",
"venue": "binance"}`); among the live, non-draining nodes that match, a session without a
live owner goes to the one with the fewest sessions (counting what this placement gives
out), ties by name. Every node runs the same function over the same snapshot and acquires
only what it is given; when snapshots differ for a moment, PostgreSQL's lease row decides.
Sessions with a live owner stay where they are (no rebalancing churn).
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
    current live owner. An owner that no longer matches or is gone loses the session."""
    load = {name: 0 for name in nodes}
    result: dict[int, str] = {}
    for sid, owner in owners.items():
        if sid in sessions and owner in nodes and matches(sessions[sid], nodes[owner]):
            result[sid] = owner
            load[owner] += 1
    for sid in sorted(sessions):
        if sid in result:
            continue
        eligible = [n for n in nodes if matches(sessions[sid], nodes[n])]
        if eligible:
            chosen = min(eligible, key=lambda n: (load[n], n))
            result[sid] = chosen
            load[chosen] += 1
    return result


def unplaced(sessions: Iterable[int], placement: Mapping[int, str]) -> list[int]:
    """Sessions no node may run (their rule matches no live node)."""
    return sorted(sid for sid in sessions if sid not in placement)
