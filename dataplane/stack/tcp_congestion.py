"""NewReno congestion control (RFC 5681, RFC 6582), with the RFC 6675 variant of the
recovery window for connections that negotiated SACK.

Only the window arithmetic lives here. The connection decides when an ACK is new, a
duplicate, partial or full, and what to (re)transmit.
"""

from __future__ import annotations

DUP_THRESH = 3  # RFC 5681 section 3.2: fast retransmit on the third duplicate ACK
_INFINITE_SSTHRESH = 1 << 30  # RFC 5681 section 3.1: "arbitrarily high" initially


class NewReno:
    """cwnd, ssthresh and the fast-recovery state of one connection, in bytes."""

    def __init__(self, smss: int, initial_cwnd_segments: int) -> None:
        self.smss = smss
        self.initial_cwnd_segments = initial_cwnd_segments
        # RFC 5681 section 3.1 / RFC 6928: IW in segments (the config says how many).
        self.cwnd = initial_cwnd_segments * smss
        self.ssthresh = _INFINITE_SSTHRESH
        self.dup_acks = 0
        self.in_recovery = False
        # RFC 6582 section 3.2 step 1: "recover" starts at the initial send sequence number.
        self.recover = 0
        self._ca_acked = 0  # bytes acknowledged since cwnd last grew in congestion avoidance

    @property
    def initial_window(self) -> int:
        return self.initial_cwnd_segments * self.smss

    def set_smss(self, smss: int) -> None:
        """The handshake fixed the segment size: rescale the initial window to it."""
        self.smss = smss
        self.cwnd = self.initial_window

    def on_new_ack(self, acked: int, acks: int = 1) -> None:
        """An ACK for new data outside recovery: grow cwnd (RFC 5681 section 3.1). `acks`:
        how many ACKs `acked` came in (one report may stand for several)."""
        self.dup_acks = 0
        if self.cwnd < self.ssthresh:
            # Slow start: cwnd += min(N, SMSS) per ACK.
            self.cwnd += min(acked, max(acks, 1) * self.smss)
        else:
            # Congestion avoidance, byte counting: one SMSS per cwnd of acknowledged data
            # (RFC 5681 equation 3 is the per-ACK approximation of this).
            self._ca_acked += acked
            if self._ca_acked >= self.cwnd:
                self._ca_acked -= self.cwnd
                self.cwnd += self.smss

    def can_enter_recovery(self, ack: int) -> bool:
        """RFC 6582 section 3.2 step 2: only if the ACK covers "recover" (no false retransmit
        of a whole window after a timeout)."""
        return not self.in_recovery and ack >= self.recover

    def enter_recovery(self, flight_size: int, high_data: int, *, sack: bool) -> None:
        """Fast retransmit: halve the window and enter fast recovery."""
        # RFC 5681 equation 4 (RFC 6582 section 3.2 step 2).
        self.ssthresh = max(flight_size // 2, 2 * self.smss)
        self.recover = high_data
        self.in_recovery = True
        self._ca_acked = 0
        if sack:
            # RFC 6675 section 5 step 4.2: cwnd = ssthresh; the pipe estimate does the rest.
            self.cwnd = self.ssthresh
        else:
            # RFC 5681 section 3.2 step 4 / RFC 6582: inflate by the three segments that left.
            self.cwnd = self.ssthresh + DUP_THRESH * self.smss

    def on_dup_ack_in_recovery(self, *, sack: bool) -> None:
        """RFC 5681 section 3.2 step 5 (RFC 6582 step 3): each further duplicate means one
        more segment has left the network. With SACK the pipe estimate accounts for it."""
        if not sack:
            self.cwnd += self.smss

    def on_partial_ack(self, acked: int, *, sack: bool) -> None:
        """RFC 6582 section 3.2 step 5: deflate by the amount acknowledged, add back one SMSS
        if at least one SMSS was acknowledged."""
        if sack:
            return
        self.cwnd = max(self.cwnd - acked, self.smss)
        if acked >= self.smss:
            self.cwnd += self.smss

    def on_full_ack(self, flight_size: int) -> None:
        """RFC 6582 section 3.2 step 3 (option 1): leave recovery without a burst."""
        self.cwnd = min(self.ssthresh, max(flight_size, self.smss) + self.smss)
        self.in_recovery = False
        self.dup_acks = 0

    def on_timeout(self, flight_size: int, high_data: int) -> None:
        """The retransmission timer expired (RFC 5681 section 3.1 equation 4, RFC 6582
        section 3.2 step 4): one segment, slow start to half the old flight."""
        self.ssthresh = max(flight_size // 2, 2 * self.smss)
        self.cwnd = self.smss  # the loss window, LW
        self.recover = high_data
        self.in_recovery = False
        self.dup_acks = 0
        self._ca_acked = 0

    def restart_after_idle(self) -> None:
        """RFC 5681 section 4.1: after an idle period longer than the RTO, do not send a
        whole stale window at once."""
        self.cwnd = min(self.cwnd, self.initial_window)
