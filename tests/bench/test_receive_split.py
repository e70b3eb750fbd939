"""`receive_split_note`: the split of the DPDK engine's bulk receive that the `ingest`
scenario prints for its engine-loop contenders (what each poll handed to Python, how full
the RX bursts were, how much each ACK acknowledged)."""

from __future__ import annotations

from wsgw_bench.ws_scenarios import receive_split_note

BEFORE = {
    "polls": 100,
    "rx_bursts": 100,
    "rx_frames": 3_000,
    "fast_bytes": 1_000,
    "acks_sent": 10,
    "empty_polls": 50,
    "sleeps": 5,
    "slow_frames": 2,
}


def after(**moved: int) -> dict[str, int]:
    return {key: value + moved.get(key, 0) for key, value in BEFORE.items()}


def test_a_bulk_receive_is_split_per_poll_burst_and_ack() -> None:
    note = receive_split_note(
        BEFORE,
        after(
            polls=100,  # 64 kB per poll
            rx_bursts=200,  # in two bursts of 22.5 frames
            rx_frames=4_500,
            fast_bytes=100 * 64 * 1024,
            acks_sent=200,  # an ACK per 32 kB
            empty_polls=150,
            sleeps=10,
            slow_frames=3,
        ),
    )
    assert note == (
        "; receive split: 64 kB per poll in 2.0 RX bursts of 22.5 frames, an ACK per 32 kB, "
        "1.5 empty bursts and 0.10 sleeps per poll, 3 frames on the slow path"
    )


def test_a_round_trip_test_gets_no_split() -> None:
    assert receive_split_note(BEFORE, after(polls=10, rx_bursts=10, fast_bytes=64_000)) == ""


def test_acks_that_python_sent_are_said_so() -> None:
    note = receive_split_note(BEFORE, after(polls=1, rx_bursts=1, fast_bytes=2 << 20))
    assert "an ACK per none sent by C" not in note
    assert "no ACK sent by C" in note
