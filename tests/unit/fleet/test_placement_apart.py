"""The legs of a feed group on different nodes (gateway.fleet.placement): at placement, at
rebalancing and at failover, whenever enough eligible nodes exist."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.fleet.placement import matches, place, together

THREE = {"x": {}, "y": {}, "z": {}}


def test_new_legs_go_to_different_nodes_even_against_the_load() -> None:
    # x is idle, y runs one: the second leg still goes to y, not beside its sibling on x.
    placed = place({1: {}, 2: {}, 3: {}}, {"x": {}, "y": {}}, owners={3: "y"}, apart={1: 7, 2: 7})
    assert placed[1] != placed[2]
    assert together(placed, {1: 7, 2: 7}) == {}


def test_legs_owned_together_are_spread_when_a_node_can_take_one() -> None:
    """Both legs on x (y was down when they were placed): y joins, the newer leg moves, even
    though a move of one session would not be made for the load alone."""
    apart = {1: 5, 2: 5}
    placed = place({1: {}, 2: {}}, {"x": {}, "y": {}}, owners={1: "x", 2: "x"}, apart=apart)
    assert placed == {1: "x", 2: "y"}


def test_failover_keeps_legs_apart() -> None:
    """z dies with leg 2 of group 9: the leg goes to the node without leg 1 (y), though x and y
    have equal load."""
    apart = {1: 9, 2: 9}
    owners = {1: "x", 2: "z", 3: "y"}
    placed = place({1: {}, 2: {}, 3: {}}, {"x": {}, "y": {}}, owners={1: "x", 3: "y"}, apart=apart)
    assert placed[1] == "x" and placed[2] == "y"
    assert owners[3] == placed[3]


def test_rebalancing_never_puts_legs_together() -> None:
    """x runs 4 plain sessions, y and z a leg each: the load moves to y and z, but no move puts a
    leg beside its sibling (a plain session moves instead)."""
    sessions = {sid: {} for sid in range(1, 7)}
    owners = {1: "y", 2: "z", 3: "x", 4: "x", 5: "x", 6: "x"}
    apart = {1: 1, 2: 1}
    placed = place(sessions, THREE, owners, apart)
    assert together(placed, apart) == {}
    assert sorted(list(placed.values()).count(n) for n in THREE) == [2, 2, 2]


def test_too_few_eligible_nodes_share_as_evenly_as_they_can() -> None:
    """Three legs, two nodes the rule allows: two share one node, and `together` names them."""
    rules = {1: {"venue": "a"}, 2: {"venue": "a"}, 3: {"venue": "a"}}
    nodes = {"x": {"venue": "a"}, "y": {"venue": "a"}, "z": {}}
    apart = {1: 4, 2: 4, 3: 4}
    placed = place(rules, nodes, owners={}, apart=apart)
    assert sorted(placed.values()) == ["x", "x", "y"]
    assert together(placed, apart) == {4: [1, 3]}


nodes_st = st.dictionaries(
    st.sampled_from("abcde"),
    st.fixed_dictionaries({}, optional={"v": st.sampled_from("pq")}),
    min_size=1,
)


@settings(max_examples=200, deadline=None)
@given(
    nodes=nodes_st,
    n_sessions=st.integers(1, 12),
    data=st.data(),
)
def test_placement_invariants(
    nodes: dict[str, dict[str, str]], n_sessions: int, data: st.DataObject
) -> None:
    """Whatever the owners: each eligible session is placed on an eligible node; a group's legs
    share a node only when fewer eligible nodes than legs exist; placing the result again
    moves nothing (the fleet settles)."""
    sids = list(range(1, n_sessions + 1))
    rules = {sid: data.draw(st.fixed_dictionaries({}, optional={"v": st.sampled_from("pq")}))
             for sid in sids}  # fmt: skip
    apart = {sid: g for sid in sids if (g := data.draw(st.integers(0, 3))) > 0}
    owners = {sid: data.draw(st.sampled_from([*nodes, "gone"])) for sid in sids}
    placed = place(rules, nodes, owners, apart)
    eligible = {sid: {n for n, labels in nodes.items() if matches(rules[sid], labels)}
                for sid in sids}  # fmt: skip
    for sid in sids:
        assert (sid in placed) == bool(eligible[sid])
        if sid in placed:
            assert placed[sid] in eligible[sid]
    for group, legs in together(placed, apart).items():
        members = [sid for sid in sids if apart.get(sid) == group]
        # Legs share a node only when some leg has fewer eligible nodes than the group has
        # legs (a greedy placement does not solve every matching: this is what it keeps).
        assert any(len(eligible[sid]) < len(members) for sid in members), (group, legs, placed)
    assert place(rules, nodes, placed, apart) == placed
