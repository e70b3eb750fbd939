"""The state table: the lifecycle's transitions allowed, everything else refused."""

from __future__ import annotations

import pytest

from gateway.sessions import TRANSITIONS, SessionStateError, State, StateMachine

# The lifecycle as the session walks it.
HAPPY = [State.CONNECTING, State.SUBSCRIBING, State.STREAMING]
RECONNECT = [State.BACKOFF, State.CONNECTING, State.SUBSCRIBING, State.STREAMING]


def test_the_lifecycle_walks() -> None:
    machine = StateMachine(clock=iter(range(100)).__next__)
    for state in [*HAPPY, *RECONNECT, State.STOPPING, State.STOPPED]:
        machine.move(state, f"to {state}")
    assert machine.state is State.STOPPED
    assert machine.terminal
    assert machine.history[-1] == (State.STOPPED, "to stopped")
    assert machine.since == 9  # the clock read at every move


@pytest.mark.parametrize(
    ("start", "target"),
    [
        (State.NEW, State.STREAMING),  # nothing streams before it subscribed
        (State.CONNECTING, State.STREAMING),
        (State.BACKOFF, State.SUBSCRIBING),  # a wait always ends in a new connection
        (State.STOPPING, State.CONNECTING),  # a stop is final
        (State.STOPPED, State.CONNECTING),
        (State.FAILED, State.CONNECTING),
        (State.STREAMING, State.SUBSCRIBING),
    ],
)
def test_transitions_outside_the_table_are_refused(start: State, target: State) -> None:
    machine = StateMachine()
    machine.state = start
    with pytest.raises(SessionStateError, match=f"{start} -> {target}"):
        machine.move(target, "bug")
    assert machine.state is start


def test_every_live_state_can_end() -> None:
    for state, targets in TRANSITIONS.items():
        if state in (State.STOPPED, State.FAILED):
            assert not targets
        elif state is State.STOPPING:
            assert targets == {State.STOPPED}
        else:
            assert {State.STOPPING, State.FAILED} <= targets, state


def test_exchange_reconnect_skips_the_wait() -> None:
    # bts:request_reconnect: streaming -> connecting, no backoff in between.
    assert State.CONNECTING in TRANSITIONS[State.STREAMING]


def test_history_is_bounded() -> None:
    machine = StateMachine()
    machine.move(State.CONNECTING, "start")
    for i in range(100):
        machine.move(State.BACKOFF, f"lost {i}")
        machine.move(State.CONNECTING, f"retry {i}")
    assert len(machine.history) == 64
