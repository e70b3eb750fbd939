"""Retransmission timeout estimation (RFC 6298) with exponential backoff.

The estimator only does the arithmetic; the connection decides which samples are valid
(Karn's rule, RFC 6298 section 3: never from a retransmitted segment unless timestamps say
which transmission was acknowledged).
"""

from __future__ import annotations

# RFC 6298 section 2: alpha = 1/8, beta = 1/4, K = 4.
_ALPHA = 1 / 8
_BETA = 1 / 4
_K = 4
# Clock granularity G: the timestamp clock ticks in milliseconds.
CLOCK_GRANULARITY = 0.001
# RFC 6298 section 5.7: after a lost SYN, data transfer starts with an RTO of 3 s.
SYN_LOSS_RTO = 3.0


class RttEstimator:
    """SRTT, RTTVAR and the backed-off RTO of one connection."""

    def __init__(self, rto_initial: float, rto_min: float, rto_max: float) -> None:
        self.rto_min = rto_min
        self.rto_max = rto_max
        self.srtt: float | None = None
        self.rttvar = 0.0
        self._base_rto = min(max(rto_initial, rto_min), rto_max)  # RFC 6298 section 2.1
        self.backoff = 0  # number of doublings since the last valid sample

    @property
    def rto(self) -> float:
        """The current timeout: the base RTO doubled once per backoff (RFC 6298 section 5.5)."""
        return min(self._base_rto * (1 << min(self.backoff, 32)), self.rto_max)

    def sample(self, rtt: float) -> None:
        """Fold in one valid measurement; it also ends any backoff (Karn, RFC 6298 section 5)."""
        rtt = max(rtt, 0.0)
        if self.srtt is None:
            # RFC 6298 section 2.2: the first measurement.
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            # RFC 6298 section 2.3: RTTVAR first, with the old SRTT.
            self.rttvar = (1 - _BETA) * self.rttvar + _BETA * abs(self.srtt - rtt)
            self.srtt = (1 - _ALPHA) * self.srtt + _ALPHA * rtt
        rto = self.srtt + max(CLOCK_GRANULARITY, _K * self.rttvar)
        # RFC 6298 sections 2.4 and 2.5: clamp to [RTO.min, RTO.max].
        self._base_rto = min(max(rto, self.rto_min), self.rto_max)
        self.backoff = 0

    def back_off(self) -> None:
        """The timer expired: double the RTO (RFC 6298 section 5.5), up to RTO.max."""
        if self.rto < self.rto_max:
            self.backoff += 1

    def syn_was_lost(self) -> None:
        """RFC 6298 section 5.7: no sample from the handshake and the SYN was retransmitted."""
        if self.srtt is None:
            self._base_rto = min(max(self._base_rto, SYN_LOSS_RTO), self.rto_max)
        self.backoff = 0
