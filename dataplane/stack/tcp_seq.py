"""Sequence-number arithmetic (RFC 9293 section 3.4, RFC 1982 serial numbers), in one place.

TCP sequence numbers and timestamps live in a 32-bit circle: "a < b" means "b is less than
2**31 ahead of a". The connection keeps its sequence variables *unwrapped* (plain Python ints
that grow past 2**32 on long transfers) so that every comparison inside the state machine is
an ordinary `<`; `unwrap` turns a 32-bit wire value into that form next to a reference it is
known to be close to, and `wrap` turns it back for the wire.
"""

from __future__ import annotations

SEQ_MODULUS = 1 << 32
SEQ_MASK = SEQ_MODULUS - 1
_HALF = 1 << 31


def wrap(seq: int) -> int:
    """The 32-bit wire value of an unwrapped sequence number."""
    return seq & SEQ_MASK


def seq_add(seq: int, delta: int) -> int:
    """`seq + delta` on the 32-bit circle."""
    return (seq + delta) & SEQ_MASK


def seq_diff(a: int, b: int) -> int:
    """Signed distance `a - b` on the 32-bit circle, in [-2**31, 2**31)."""
    return ((a - b + _HALF) & SEQ_MASK) - _HALF


def seq_lt(a: int, b: int) -> bool:
    return seq_diff(a, b) < 0


def seq_le(a: int, b: int) -> bool:
    return seq_diff(a, b) <= 0


def seq_gt(a: int, b: int) -> bool:
    return seq_diff(a, b) > 0


def seq_ge(a: int, b: int) -> bool:
    return seq_diff(a, b) >= 0


def unwrap(wire: int, reference: int) -> int:
    """The unwrapped number whose low 32 bits are `wire`, nearest to `reference` (unwrapped).

    Valid while the true value is within 2**31 of the reference, which the windows guarantee
    (RFC 7323 section 2.3 limits the window to 2**30 for this very reason).
    """
    return reference + seq_diff(wire, reference & SEQ_MASK)
