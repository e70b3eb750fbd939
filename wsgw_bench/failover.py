"""`failover`: a feed group of two legs against a single session, side by side, while one
leg is killed every few seconds (issue #19: "10 minutes at 10k msg/s with one leg killed
every 10 s: 0 messages lost, 0 duplicated ... shown side by side with a single session").

What runs, all real (no mocks):

    lab namespace   the feed simulator (Binance dialect, a process of its own) on
                    0.0.0.0:SIM_PORT, its feed group GROUP: every connection of the group
                    gets the same stream (same trade ids, same sim_seq, same sim_ts stamp)
    twin namespace  (`Lab(kernel_client=True)`) the kernel transport's OS sockets
    this process    the gateway: LiveRuntime + DpdkEngines as `wsgw serve` builds them, the
                    group (leg A over wsgw's DPDK stack, leg B over OS sockets, arbitrated)
                    and the single session S (DPDK, the same stream), into the hub's ring
    child process   a ring reader of both contenders' topics, tallying per contender what
                    it got by the simulator's per-topic sim_seq, and its latency

Kills (`schedule`): at every multiple of --kill-every s one leg, A and B in turn; the kind
cycles reset, reset, link cut, link cut (A reset, B reset, A's link cut, B's link cut, ...).
A reset is the simulator's RST on that leg's connection; a link cut takes the leg's
peer-side veth down for --link-down-for s. The single session stands for a gateway with one
line: every kill hits it too (its own reset beside a leg's reset; A's link is also S's, so
a cut of A's link cuts S; beside a cut of B's link, S is reset).

Counted in the window from the first kill's time (once both contenders deliver) to the end
of the stream (the simulator stops publishing, the stragglers arrive): per contender
messages delivered, lost (sent in the window, never read), duplicated (read again), gaps
(`$gap` records) and the latency from the simulator's send stamp to the reader (p50/p99);
for the group each leg's won/late/lag (the arbiter's figures) and reconnects.

Each leg's send -> arrival: the group runs with GroupSpec.tap, so every copy a leg brought
is also in the ring under the leg's session id with its own receive stamp (the stamp the
arbiter was given), read and tallied like the group's records: per message the same clock
and the same reader as the group's send -> gateway RX. Chosen over "the group's latency plus
the leg's lag": the lag samples are not per message (a ring of the latest 1024), so the sum
cannot be formed per message without a second stream anyway. The leg streams also tell a
loss of the group apart: a message the group lost that some leg brought is a hole the hold
gave up on (a false loss), one no leg brought is a real hole (both legs missed it).

Duration: `--duration S`, else 10 minutes (--quick: 25 s); `--rate` msg/s over all topics
(default 10k); `--kill-every` (default 10 s). Not part of `wsgw bench all`.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import queue
import threading
import time
from array import array
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from gateway.groups.arbiter import LAG_SAMPLES
from gateway.groups.feed import DEFAULT_HOLD_MS
from gateway.lab import Lab
from gateway.simulator.process import start_simulator
from wsgw_bench.core import (
    BenchOptions,
    Measurement,
    report_run,
    scenario,
    scenario_log,
    unique_lab_name,
)
from wsgw_bench.faultsoak import dpdk_runtime, session_counters, start_binance, stop_sessions
from wsgw_bench.feed import sim_tail
from wsgw_bench.soak import Child, wait_until

SCENARIO = "failover"
SIM_PORT = 9480
GROUP = "failover"  # the simulator's feed group
GROUP_ID = 1
TOPICS = ("btcusdt@trade", "ethusdt@trade", "solusdt@trade", "xrpusdt@trade")
DEFAULT_RATE = 10_000.0  # msg/s over all topics
RING_CAPACITY = 64 << 20
PORT_ID = 1
RESET = "reset"
LINK = "link"
#: The contenders' sessions: (session id, simulator leg name, transport).
LEG_A = (11, "A", "dpdk")
LEG_B = (12, "B", "kernel")
SINGLE = (13, "S", "dpdk")
SESSIONS = (LEG_A, LEG_B, SINGLE)
GROUP_CONTENDER = "group A+B"
SINGLE_CONTENDER = "single session"
#: Each leg's own stream (the group's tap: every copy it brought, with its receive stamp).
LEG_CONTENDERS = {sid: f"leg {name} ({transport})" for sid, name, transport in (LEG_A, LEG_B)}
GAP_REASONS_KEPT = 8
FALSE_LOSS_RUNS_KEPT = 40
WIRE_SILENCES_KEPT = 6

Log = Callable[[str], None]


# ---- the plan -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    duration: float  # seconds of stream from the first messages on
    rate: float = DEFAULT_RATE  # msg/s over all topics
    kill_every: float = 10.0
    link_down_for: float = 2.0
    #: The group's hold (GroupSpec.hold_ms, the API's default): how long a message ahead of
    #: a hole waits for the other leg once that leg stops moving (a live leg that keeps
    #: arriving is waited for, up to the arbiter's max hold, 1 s).
    hold_ms: int = DEFAULT_HOLD_MS
    settle: float = 3.0  # after the stream stops: stragglers reach the reader


def plan_for(options: BenchOptions) -> Plan:
    return Plan(
        duration=options.duration or (25.0 if options.quick else 600.0),
        rate=options.rate or DEFAULT_RATE,
        kill_every=options.kill_every or (5.0 if options.quick else 10.0),
        link_down_for=options.link_down_for or 2.0,
    )


@dataclass(frozen=True)
class Kill:
    at: float  # seconds after the start (planned, or when it was made)
    leg: str  # "A" or "B"
    kind: str  # RESET or LINK


def schedule(plan: Plan) -> list[Kill]:
    """A kill at every multiple of kill_every before the end (a cut ends before it): legs
    A, B in turn, kinds reset, reset, link, link."""
    kills: list[Kill] = []
    k = 1
    while k * plan.kill_every < plan.duration:
        kind = RESET if k % 4 in (1, 2) else LINK
        at = k * plan.kill_every
        if kind == RESET or at + plan.link_down_for < plan.duration:
            kills.append(Kill(at, "A" if k % 2 else "B", kind))
        k += 1
    return kills


# ---- what the reader saw (in the consumer process) ---------------------------------------------
@dataclass
class Tally:
    """One contender's stream as the reader saw it, counted in the window: per topic, sim_seq
    above its start mark and up to its end mark. Every message read is marked, also before
    the start marks reach the reader (a message read in that instant is no loss)."""

    duplicated: int = 0  # copies of a message already read
    out_of_order: int = 0  # a message below the topic's newest one read
    gaps: int = 0  # `$gap` records in the window
    gap_lost: int = 0  # the `lost` those records announced (where known)
    gap_reasons: list[str] = field(default_factory=list)  # the first few, with their time
    seen: dict[str, bytearray] = field(default_factory=dict)  # per topic, seq - start -> 1
    newest: dict[str, int] = field(default_factory=dict)
    latency_us: array[int] = field(default_factory=lambda: array("q"))
    #: send -> the gateway's receipt (the ring record's stamp: the RX time of the copy that
    #: went out; for the group, the first copy of any leg: per message the faster leg's)
    arrival_us: array[int] = field(default_factory=lambda: array("q"))
    #: per topic, seq - 1 -> the gateway's receive stamp and the send stamp (ns; 0: not read):
    #: what `false_loss_detail` needs to tell when each leg brought a message the group lost
    received_ns: dict[str, array[int]] = field(default_factory=dict)
    sent_ns: dict[str, array[int]] = field(default_factory=dict)
    #: the `$gap` records' own stamps (when the group declared the hole) and reasons
    gap_marks: list[tuple[int, str]] = field(default_factory=list)

    def stamp(self, topic: str, seq: int, received_ns: int, sent_ns: int) -> None:
        """Where and when a message was read, for the loss detail."""
        for table, value in ((self.received_ns, received_ns), (self.sent_ns, sent_ns)):
            stamps = table.get(topic)
            if stamps is None:
                stamps = table[topic] = array("q")
            if seq > len(stamps):
                stamps.frombytes(bytes(8 * (seq + 65536 - len(stamps))))
            if not stamps[seq - 1]:
                stamps[seq - 1] = value

    def message(
        self,
        topic: str,
        seq: int,
        start: int | None,
        latency_ns: int,
        arrival_ns: int | None = None,
    ) -> None:
        """One message read; start: the topic's start mark (None: not known yet, the
        window's edge: the message is only marked as seen)."""
        index = seq - 1  # sim_seq counts from 1 on a fresh simulator
        flags = self.seen.get(topic)
        if flags is None:
            flags = self.seen[topic] = bytearray()
        if index >= len(flags):
            flags.extend(bytes(index + 65536 - len(flags)))
        if flags[index]:
            if start is not None and seq > start:
                self.duplicated += 1
            return
        flags[index] = 1
        if start is None or seq <= start:
            return
        if seq < self.newest.get(topic, 0):
            self.out_of_order += 1
        else:
            self.newest[topic] = seq
        self.latency_us.append(latency_ns // 1000)
        if arrival_ns is not None:
            self.arrival_us.append(arrival_ns // 1000)

    def report(self, starts: dict[str, int], ends: dict[str, int]) -> dict[str, Any]:
        """Figures up to the end marks (sim_seq), the messages after them left out."""
        delivered = 0
        for topic, flags in self.seen.items():
            delivered += sum(flags[starts.get(topic, 0) : ends.get(topic, 0)])
        expected = sum(max(0, ends[t] - starts.get(t, 0)) for t in ends)
        latencies = sorted(self.latency_us)
        arrivals = sorted(self.arrival_us)

        def quantile(q: float, of: list[int] = latencies) -> float | None:
            if not of:
                return None
            return float(of[min(len(of) - 1, int(q * len(of)))])

        return {
            "expected": expected,
            "delivered": delivered,
            "lost": expected - delivered,
            "duplicated": self.duplicated,
            "out_of_order": self.out_of_order,
            "gaps": self.gaps,
            "gap_lost": self.gap_lost,
            "gap_reasons": self.gap_reasons,
            "latency_p50_us": quantile(0.5),
            "latency_p99_us": quantile(0.99),
            "latency_max_us": float(latencies[-1]) if latencies else None,
            "arrival_p50_us": quantile(0.5, arrivals),
            "arrival_p99_us": quantile(0.99, arrivals),
        }


def tally_consumer_main(
    conn: Connection, ring: str, contenders: dict[int, str], filters: list[str]
) -> None:
    """The reader: waits for the window's start marks, tallies, answers the end marks with
    every contender's report."""
    import orjson

    from dataplane.ring import Gap, RingReader
    from gateway.hub.names import RING_GAP_TOPIC

    tallies = {name: Tally() for name in contenders.values()}
    starts: dict[str, int] | None = None
    lapped = 0
    with RingReader.attach(ring, topics=filters, start="latest") as reader:
        conn.send("ready")
        while True:
            if conn.poll():
                command = conn.recv()
                if command[0] == "start":
                    starts = command[1]
                    continue
                break
            for event in reader.read_batch(timeout=0.1):
                if isinstance(event, Gap):
                    lapped += event.lost
                    continue
                name = contenders.get(event.session_id)
                if name is None:
                    continue
                tally = tallies[name]
                if event.topic == RING_GAP_TOPIC:
                    if starts is None:
                        continue
                    record = orjson.loads(bytes(event.payload))
                    tally.gaps += 1
                    tally.gap_marks.append((event.ts_ns, str(record.get("reason"))))
                    tally.gap_lost += record.get("lost") or 0
                    if len(tally.gap_reasons) < GAP_REASONS_KEPT:
                        tally.gap_reasons.append(f"{time.time():.3f} {record.get('reason')}")
                    continue
                found = sim_tail(bytes(event.payload))
                if found is None:
                    continue
                topic = event.topic.split(":", 1)[1]
                now = time.time_ns()
                start = None if starts is None else starts.get(topic, 0)
                tally.message(topic, found[0], start, now - found[1], event.ts_ns - found[1])
                tally.stamp(topic, found[0], event.ts_ns, found[1])
    ends: dict[str, int] = command[1]
    reports = {n: t.report(starts or {}, ends) for n, t in tallies.items()}
    group = reports.get(GROUP_CONTENDER)
    if group is not None and group["lost"]:
        legs = [tallies[n] for n in LEG_CONTENDERS.values() if n in tallies]
        group["lost_brought_by_a_leg"] = brought_by_a_leg(
            tallies[GROUP_CONTENDER], legs, starts or {}, ends
        )
        runs: list[dict[str, Any]] = []
        group["false_loss_detail"] = false_loss_detail(
            tallies[GROUP_CONTENDER],
            {n: tallies[n] for n in LEG_CONTENDERS.values() if n in tallies},
            starts or {},
            ends,
            runs,
        )
        group["false_loss_runs"] = runs
    for name in LEG_CONTENDERS.values():
        if name in reports:
            reports[name]["silences"] = leg_silences(tallies[name], DEFAULT_HOLD_MS * 1_000_000)
    conn.send({"lapped": lapped, "contenders": reports})


def leg_silences(leg: Tally, longer_than_ns: int) -> list[tuple[int, int, int, int]]:
    """Each time the leg brought nothing (on any topic) for longer than `longer_than_ns`:
    (last arrival before, first after, the send stamps of those two messages; ns). Equal
    send stamps' spacing and silence says the simulator sent nothing meanwhile; a short
    spacing says the copies were sent and then waited on their way (issue #19)."""
    pairs = sorted(
        (r, t)
        for topic, got in leg.received_ns.items()
        for r, t in zip(got, leg.sent_ns.get(topic, array("q")), strict=False)
        if r
    )
    return [
        (a[0], b[0], a[1], b[1])
        for a, b in itertools.pairwise(pairs)
        if b[0] - a[0] > longer_than_ns
    ]


def brought_by_a_leg(
    group: Tally, legs: list[Tally], starts: dict[str, int], ends: dict[str, int]
) -> int:
    """Messages of the window the group did not deliver but some leg brought (the hold gave
    up on them: a false loss); the rest of the group's losses no leg brought."""
    count = 0
    for topic, end in ends.items():
        mine = group.seen.get(topic, bytearray())
        theirs = [leg.seen.get(topic, bytearray()) for leg in legs]
        for index in range(starts.get(topic, 0), end):
            if index < len(mine) and mine[index]:
                continue
            if any(index < len(flags) and flags[index] for flags in theirs):
                count += 1
    return count


def false_loss_detail(
    group: Tally,
    legs: dict[str, Tally],
    starts: dict[str, int],
    ends: dict[str, int],
    runs: list[dict[str, Any]] | None = None,
) -> list[str]:
    """Per run of messages the group lost but a leg brought (the first FALSE_LOSS_RUNS_KEPT):
    when the group declared the hole (its `$gap` record's stamp), and per leg when its copy
    of the message before the hole, of the first lost one and of the first one after the
    run arrived, and its last arrival on any topic before the declaration: all in ms after
    the first lost message was sent. Tells which leg was waited for, and whether it was
    silent on the wire (its copies sent long before they arrived) or its frames merely
    unread. `runs`, if given, gets each run's stamps (ns) for `wire_detail`."""
    lines: list[str] = []
    for topic, end in sorted(ends.items()):
        mine = group.seen.get(topic, bytearray())
        index = starts.get(topic, 0)
        sents = [leg.sent_ns.get(topic, array("q")) for leg in legs.values()]

        def sent_by_a_leg(i: int, sents: list[array[int]] = sents) -> int:
            """The send stamp of message i if some leg brought it, else 0."""
            return next((s[i] for s in sents if i < len(s) and s[i]), 0)

        def false_lost(i: int, mine: bytearray = mine) -> bool:
            return not (i < len(mine) and mine[i]) and sent_by_a_leg(i) != 0

        while index < end and len(lines) < FALSE_LOSS_RUNS_KEPT:
            if not false_lost(index):
                index += 1
                continue
            first = index
            while index < end and false_lost(index):
                index += 1
            seq = first + 1  # the first lost message's sim_seq
            sent_at = sent_by_a_leg(first)
            after = index + 1  # the first message delivered after the run
            declared = next(
                (ts for ts, reason in group.gap_marks if topic in reason and ts >= sent_at), 0
            )

            def ms(ns: int, sent_at: int = sent_at) -> str:
                return "-" if not ns else f"{(ns - sent_at) / 1e6:+.1f}"

            parts = [
                f"{topic} sim_seq {seq}..{index} ({index - first} lost): declared {ms(declared)}"
            ]
            run: dict[str, Any] = {"sent": sent_at, "declared": declared, "legs": {}}
            for name, leg in legs.items():
                got = leg.received_ns.get(topic, array("q"))

                def at(s: int, got: array[int] = got) -> int:
                    return got[s - 1] if 0 < s <= len(got) else 0

                silent_since = max(
                    (
                        max(
                            (
                                v
                                for v in stamps[max(0, seq - 50_000) : seq + 50_000]
                                if v < declared
                            ),
                            default=0,
                        )
                        for stamps in leg.received_ns.values()
                    ),
                    default=0,
                )
                run["legs"][name] = {"silent_since": silent_since, "first": at(seq)}
                parts.append(
                    f"{name}: before {ms(at(seq - 1))} first {ms(at(seq))} after "
                    f"{ms(at(after))} last arrival before the declaration {ms(silent_since)}"
                )
            lines.append("; ".join(parts))
            if runs is not None:
                runs.append(run)
    return lines


# ---- the simulator ------------------------------------------------------------------------------
class Upstream:
    """The feed simulator in the lab's namespace, driven through its stdin."""

    def __init__(self, lab: Lab, rate_per_topic: float) -> None:
        self.proc = start_simulator(
            lab,
            SIM_PORT,
            rate_per_topic,
            host="0.0.0.0",  # noqa: S104 (inside the lab's namespace: both veths reach it)
            stdin=True,
        )
        # Its answers, line by line, read on a thread of their own: a select() on the
        # buffered pipe would miss a line already in the buffer.
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._asking = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="simulator-answers", daemon=True)
        self._reader.start()
        try:
            self.command("stats")  # its first answer follows its description line
        except BaseException:
            self.close()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            self.lines.put(text)
        self.lines.put(None)

    def command(self, line: str, timeout: float = 60.0) -> dict[str, Any]:
        """Send one stdin command and return its answer (other lines are skipped); one at a
        time (the kills and the WireSampler ask from their own threads)."""
        with self._asking:
            return self._command(line, timeout)

    def _command(self, line: str, timeout: float) -> dict[str, Any]:
        proc = self.proc
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        while True:
            try:
                text = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise RuntimeError(f"the simulator did not answer {line!r}") from None
            if text is None:
                raise RuntimeError(f"the simulator exited (answering {line!r})")
            answer: dict[str, Any] = json.loads(text)
            if "ok" in answer or "counters" in answer:
                return answer

    def sent(self) -> dict[str, int]:
        """Messages published so far on each of the group's topics (its last sim_seq)."""
        sent = self.command("stats")["sent_per_topic"]
        return {t: int(sent.get(f"{GROUP}/binance:{t}", 0)) for t in TOPICS}

    def slow_consumers(self) -> int:
        """Connections the simulator dropped for a backlog past its limit (a gateway that
        fell that far behind: what was queued for that connection is gone)."""
        return int(self.command("stats")["counters"].get("slow_consumers", 0))

    def reset(self, leg: str) -> None:
        self.command(f"fault reset target=leg:{GROUP}/{leg}")

    def reset_group(self) -> None:
        """Every connection of the group reset at once (every leg down)."""
        self.command(f"fault reset target=group:{GROUP}")

    def close(self) -> None:
        proc = self.proc
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._reader.join(5)  # it reads to the end of the pipe, then the pipe can close
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def leg_link(lab: Lab, leg: str) -> str:
    """The peer-side veth a leg (or the single session) reaches the simulator through."""
    transport = {name: transport for _, name, transport in SESSIONS}[leg]
    return lab.peer_if if transport == "dpdk" else lab.peer_client_if


def make_kills(plan: Plan, lab: Lab, upstream: Upstream, start: float, log: Log) -> list[Kill]:
    """Kill on schedule until the plan's end; the kills made."""
    done: list[Kill] = []
    for kill in schedule(plan):
        time.sleep(max(0.0, start + kill.at - time.monotonic()))
        at = time.monotonic() - start
        if kill.kind == RESET:
            upstream.reset(kill.leg)
            upstream.reset(SINGLE[1])
            log(f"t={at:5.1f} s reset leg {kill.leg} and the single session")
        else:
            link = leg_link(lab, kill.leg)
            shares = link == leg_link(lab, SINGLE[1])
            if not shares:
                upstream.reset(SINGLE[1])
            lab.exec(["ip", "link", "set", link, "down"])
            try:
                time.sleep(plan.link_down_for)
            finally:
                lab.exec(["ip", "link", "set", link, "up"])
            log(
                f"t={at:5.1f} s leg {kill.leg}'s link cut for {plan.link_down_for:g} s, "
                + ("the single session's too" if shares else "the single session reset")
            )
        done.append(Kill(round(at, 3), kill.leg, kill.kind))
    time.sleep(max(0.0, start + plan.duration - time.monotonic()))
    return done


class LagSampler:
    """The arbiter keeps each leg's lag over its latest LAG_SAMPLES late copies only (a
    fraction of a second at 10k msg/s): its figures at the end say nothing of the kills. This
    reads them every `every` s through the run: per leg, the p99s seen."""

    def __init__(self, figures: Callable[[], dict[str, Any] | None], every: float = 0.5) -> None:
        self.figures = figures
        self.every = every
        self.p99_ns: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="failover-lag", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for leg in (self.figures() or {}).get("legs", []):
                if leg["lag_p99_ns"] is not None:
                    self.p99_ns.setdefault(leg["session_id"], []).append(leg["lag_p99_ns"])

    def stop(self) -> dict[int, dict[str, float | None]]:
        """Per leg session id: the median and the worst of the p99s seen (ns)."""
        self._stop.set()
        self._thread.join(10)
        out: dict[int, dict[str, float | None]] = {}
        for sid, seen in self.p99_ns.items():
            ordered = sorted(seen)
            out[sid] = {
                "lag_p99_median_ns": float(ordered[len(ordered) // 2]),
                "lag_p99_worst_ns": float(ordered[-1]),
            }
        return out


Sample = tuple[int, dict[str, tuple[int, int]], dict[str, tuple[int, ...]]]


def sim_sockets(path: str) -> dict[str, tuple[int, ...]]:
    """The simulator's established connections (/proc/PID/net/tcp of its namespace): per
    peer "ip:port" (tx_queue: bytes not yet acknowledged, timer: 1 retransmission or 4
    zero-window probe, retransmissions)."""
    out: dict[str, tuple[int, ...]] = {}
    with open(path) as table:
        next(table)
        for row in table:
            f = row.split()
            if not f[1].endswith(f":{SIM_PORT:04X}") or f[3] != "01":  # ESTABLISHED
                continue
            ip, port = f[2].split(":")
            peer = ".".join(str(b) for b in reversed(bytes.fromhex(ip))) + f":{int(port, 16)}"
            timer = int(f[5].split(":")[0], 16)
            out[peer] = (int(f[4].split(":")[0], 16), timer, int(f[6], 16))
    return out


def cpu_clocks(paths: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Each task's (CPU ns, run-queue wait ns) from its /proc schedstat."""
    out: dict[str, tuple[int, int]] = {}
    for name, path in paths.items():
        try:
            with open(path) as stat:
                run, wait, _ = stat.read().split()
        except (OSError, ValueError):
            continue
        out[name] = (int(run), int(wait))
    return out


def wire_sampler_main(conn: Connection, sim_tcp: str, clocks: dict[str, str], every: float) -> None:
    """The sampling loop, a process of its own (no GIL shared with the gateway): samples
    until told to stop, then sends them."""
    samples: list[Sample] = []
    conn.send("ready")
    while not conn.poll(every):
        try:
            samples.append((time.time_ns(), cpu_clocks(clocks), sim_sockets(sim_tcp)))
        except (OSError, StopIteration):
            continue
    conn.recv()
    conn.send({"samples": samples})


class WireSampler:
    """Whose lateness a leg's silence is (issue #19): every `every` s, from a process of
    its own, the simulator's TCP sockets as its kernel sees them (`sim_sockets`) and the CPU
    time and run-queue wait (schedstat) of the simulator and of the gateway's engine and
    session threads; every second the simulator's connections (peer -> leg). Read from
    outside both, so a starved simulator or engine shows as its wait."""

    def __init__(self, upstream: Upstream, every: float = 0.005) -> None:
        self.upstream = upstream
        pid, me = upstream.proc.pid, os.getpid()
        clocks = {"simulator": f"/proc/{pid}/schedstat"}
        for thread in threading.enumerate():
            if thread.name.startswith(("wsgw-engine", "wsgw-sessions")) and thread.native_id:
                clocks[thread.name] = f"/proc/{me}/task/{thread.native_id}/schedstat"
        #: (realtime ns, {clock: (run ns, wait ns)}, {peer: (tx_queue, timer, retransmits)})
        self.samples: list[Sample] = []
        self.legs: dict[str, str] = {}  # peer "ip:port" -> the simulator's leg name
        self._stamps: list[int] = []  # the samples' stamps, for bisect
        self._child = Child(wire_sampler_main, f"/proc/{pid}/net/tcp", clocks, every)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="failover-wire", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                for c in self.upstream.command("stats")["connections"]:
                    if c.get("peer") and c.get("group") == GROUP:
                        self.legs[c["peer"]] = c["leg"]
            except RuntimeError:
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        try:
            self.samples = self._child.results(60)["samples"]
        finally:
            self._child.close()

    def span(self, lo: int, hi: int) -> tuple[str, dict[str, Any]]:
        """lo..hi (realtime ns): each clock's CPU and run-queue wait (ms), per leg its
        socket's worst unacknowledged bytes, timers and retransmissions seen; as text and
        as facts."""
        if len(self._stamps) != len(self.samples):
            self._stamps = [sample[0] for sample in self.samples]
        stamps = self._stamps
        window = self.samples[bisect.bisect_left(stamps, lo) : bisect.bisect_right(stamps, hi)]
        facts: dict[str, Any] = {"samples": len(window), "clocks": {}, "legs": {}}
        if len(window) < 2:
            return f"{(hi - lo) / 1e6:.0f} ms: {len(window)} samples", facts
        gap = max(b[0] - a[0] for a, b in itertools.pairwise(window))
        text = [f"{(hi - lo) / 1e6:.0f} ms ({len(window)} samples, gap {gap / 1e6:.0f})"]
        first, last = window[0][1], window[-1][1]
        for name, (run_ns, wait_ns) in last.items():
            if name in first:
                cpu, wait = (run_ns - first[name][0]) / 1e6, (wait_ns - first[name][1]) / 1e6
                facts["clocks"][name] = (cpu, wait)
                text.append(f"{name} cpu {cpu:.0f} wait {wait:.0f}")
        by_leg: dict[str, list[tuple[int, ...]]] = {}
        for _, _, tcp in window:
            for peer, row in tcp.items():
                by_leg.setdefault(self.legs.get(peer, peer), []).append(row)
        for leg, rows in sorted(by_leg.items()):
            seen = (
                max(r[0] for r in rows),
                sorted({r[1] for r in rows if r[1]}),
                max(r[2] for r in rows),
            )
            facts["legs"][leg] = seen
            text.append(f"sock {leg} unacked max {seen[0]} timers {seen[1]} retrans max {seen[2]}")
        return ", ".join(text), facts

    def detail(self, run: dict[str, Any]) -> str:
        """For one false-loss run: from the first lost message's send to the hole's
        declaration, and from there to the waited leg's copy (`span`)."""
        sent, declared = run["sent"], run["declared"]
        late = max((leg["first"] for leg in run["legs"].values()), default=0) or declared
        return (
            f"send->declared {self.span(sent, declared)[0]} | "
            f"declared->copy {self.span(declared, late)[0]}"
        )

    def survey(
        self, leg: str, silences: list[tuple[int, int, int, int]], kills: list[tuple[int, int]]
    ) -> list[str]:
        """Whose lateness each silence of `leg` longer than the hold was, outside its kills
        (realtime ns windows): the simulator's when the send stamps around it are spaced
        like the silence (it sent nothing meanwhile), else the copies waited on their way:
        in the simulator's socket (unacked bytes; a zero window: the gateway not reading;
        retransmissions: a segment lost) or unacknowledged by a gateway not polling (its
        engine/session thread's run-queue wait)."""
        sender, on_way, killed = [], [], 0
        for t0, t1, s0, s1 in silences:
            if any(k0 <= t1 and t0 <= k1 for k0, k1 in kills):
                killed += 1
            elif s1 - s0 >= (t1 - t0) // 2:
                sender.append(t1 - t0)
            else:
                on_way.append((t1 - t0, t0, t1, t1 - s1))
        lines = [
            f"leg {leg}: {len(silences)} silences > hold: {killed} at its kills; "
            f"{len(sender)} the simulator sent nothing meanwhile (longest "
            f"{max(sender, default=0) / 1e6:.0f} ms); {len(on_way)} copies sent and delayed "
            f"on their way (longest {max((w[0] for w in on_way), default=0) / 1e6:.0f} ms)"
        ]
        zero = retrans = unacked = covered = 0
        starved: dict[str, int] = {}  # clock -> silences it waited for a CPU half of
        for silent, t0, t1, _ in on_way:
            facts = self.span(t0, t1)[1]
            covered += facts["samples"] >= 2
            for name, (_, wait) in facts["clocks"].items():
                starved[name] = starved.get(name, 0) + (wait * 1e6 >= silent / 2)
            seen = facts["legs"].get(leg)
            if seen:
                zero += 4 in seen[1]
                retrans += seen[2] > 0
                unacked += seen[0] > 0
        waits = ", ".join(f"{name} {n}" for name, n in sorted(starved.items()))
        lines.append(
            f"  of the delayed: sampled {covered}; its socket held unacked bytes in "
            f"{unacked}, a zero window in {zero}, retransmissions in {retrans}; waited for a "
            f"CPU half the silence or more: {waits}"
        )
        for silent, t0, t1, waited in sorted(on_way, reverse=True)[:WIRE_SILENCES_KEPT]:
            lines.append(
                f"  silent {silent / 1e6:.1f} ms, copy waited {waited / 1e6:.1f} ms after its "
                f"send: {self.span(t0, t1)[0]}"
            )
        for silent in sorted(sender, reverse=True)[:WIRE_SILENCES_KEPT]:
            lines.append(f"  silent {silent / 1e6:.1f} ms: the simulator sent nothing")
        return lines


# ---- results --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    plan: Plan
    elapsed: float
    kills: tuple[Kill, ...]
    contenders: dict[str, dict[str, Any]]  # Tally.report by contender
    group: dict[str, Any]  # the group's figures (runtime.group_figures)
    sessions: dict[str, dict[str, float]]  # session counters by leg name (A, B, S)
    lapped: int
    slow_consumers: int = 0  # connections the simulator dropped as too far behind

    def problems(self) -> list[str]:
        """The group's promise (nothing lost, nothing twice, in order) and the single
        session's honesty (its losses announced by gaps)."""
        out: list[str] = []
        group = self.contenders[GROUP_CONTENDER]
        for what in ("lost", "duplicated", "out_of_order", "gaps"):
            if group[what]:
                out.append(f"the group: {group[what]} {what.replace('_', ' ')}")
        if not group["delivered"]:
            out.append("the group delivered nothing")
        single = self.contenders[SINGLE_CONTENDER]
        if single["lost"] and not single["gaps"]:
            out.append(f"the single session lost {single['lost']} without a gap record")
        if self.lapped:
            out.append(f"the reader was lapped ({self.lapped} records): figures incomplete")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    @property
    def sent_rate(self) -> float:
        """Messages/s the simulator published in the window (below the plan's: overloaded)."""
        return float(self.contenders[GROUP_CONTENDER]["expected"]) / max(self.elapsed, 1e-9)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": self.problems(),
            "plan": asdict(self.plan),
            "elapsed_s": self.elapsed,
            "sent_rate": self.sent_rate,
            "kills": [asdict(k) for k in self.kills],
            "contenders": self.contenders,
            "group": self.group,
            "sessions": self.sessions,
            "lapped": self.lapped,
            "slow_consumers": self.slow_consumers,
        }


# ---- the run --------------------------------------------------------------------------------
def run_failover(plan: Plan, lab_name: str, log: Log = print) -> Result:
    """The whole run (module docstring); everything it made is gone when it returns or
    raises, Ctrl-C included."""
    from functools import partial

    from gateway.groups.feed import GroupSpec, group_hub_id
    from gateway.hub import ring_topics
    from gateway.runtime import PortSpec
    from gateway.sessions import SessionConfig
    from gateway.sessions.config import ReconnectPolicy
    from gateway.simulator import with_group

    lab = Lab(lab_name, kernel_client=True)
    ring_name = f"wsgw-failover{os.getpid()}-messages"
    hub_id = group_hub_id(GROUP_ID)
    contenders = {hub_id: GROUP_CONTENDER, SINGLE[0]: SINGLE_CONTENDER, **LEG_CONTENDERS}
    # The operator's defaults but for reconnects: the first after 0.2 s (not 0.5), and a
    # connection is stable after 1 s (not 10): the single session, killed every
    # kill_every s, would otherwise back off further each time.
    session_config = partial(
        SessionConfig.from_spec, reconnect=ReconnectPolicy(initial_delay_s=0.2, stable_after_s=1.0)
    )
    with ExitStack() as undo:
        lab.down()
        undo.callback(lab.down)
        lab.up()
        upstream = Upstream(lab, plan.rate / len(TOPICS))
        undo.callback(upstream.close)
        _, runtime = dpdk_runtime(undo, lab, ring_name, RING_CAPACITY, session_config)
        runtime.port_up(PortSpec(PORT_ID, "failover", lab.vdev, lab.gw_ip, lab.netmask, None, 1500))
        legs = (LEG_A[0], LEG_B[0])
        runtime.set_group(GroupSpec(GROUP_ID, "failover", legs, "binance", plan.hold_ms, tap=True))
        filters = [t for sid in contenders for t in ring_topics(sid, list(TOPICS))]
        consumer = Child(tally_consumer_main, ring_name, contenders, sorted(set(filters)))
        undo.callback(consumer.close)
        hosts = {"dpdk": lab.peer_ip, "kernel": lab.peer_client_ip}
        for sid, leg, transport in SESSIONS:
            url = with_group(f"ws://{hosts[transport]}:{SIM_PORT}/binance/stream", GROUP, leg)
            start_binance(runtime, sid, f"failover-{leg}", url, transport, TOPICS, PORT_ID)

        def counters() -> dict[str, dict[str, float]]:
            by_sid = session_counters(runtime)
            return {leg: by_sid.get(sid, {}) for sid, leg, _ in SESSIONS}

        wait_until(
            lambda: all(c.get("messages", 0) > 0 for c in counters().values()),
            "the first messages of every session",
            30.0,
        )
        starts = upstream.sent()
        consumer.conn.send(("start", starts))
        start = time.monotonic()
        log(
            f"{plan.duration:.0f} s at {plan.rate:.0f} msg/s ({len(TOPICS)} topics): a leg "
            f"killed every {plan.kill_every:g} s (reset, reset, link cut "
            f"{plan.link_down_for:g} s, ...), hold {plan.hold_ms} ms, lab {lab.name}, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        sampler = LagSampler(lambda: runtime.group_figures(GROUP_ID))
        wire = WireSampler(upstream)
        try:
            kills = make_kills(plan, lab, upstream, start, log)
        finally:
            lag_seen = sampler.stop()
            wire.stop()
        upstream.command("rate rate=0")  # the stream ends: the window closes here
        ends = upstream.sent()
        slow_consumers = upstream.slow_consumers()
        elapsed = time.monotonic() - start
        time.sleep(plan.settle)
        group = runtime.group_figures(GROUP_ID) or {}
        for leg in group.get("legs", []):
            leg.update(lag_seen.get(leg["session_id"], {}))
        sessions = counters()
        stop_sessions(runtime, [sid for sid, _, _ in SESSIONS])
        consumer.conn.send(("stop", ends))
        if not consumer.conn.poll(60):
            raise RuntimeError("the reader did not report")
        seen: dict[str, Any] = consumer.conn.recv()
        group_seen = seen["contenders"].get(GROUP_CONTENDER, {})
        group_seen["wire_detail"] = [
            wire.detail(run) for run in group_seen.pop("false_loss_runs", [])
        ]
        start_rt = time.time_ns() - int((time.monotonic() - start) * 1e9)
        for sid, leg, _ in (LEG_A, LEG_B):
            report = seen["contenders"].get(LEG_CONTENDERS[sid], {})
            windows = [
                (start_rt + int(k.at * 1e9), start_rt + int((k.at + plan.link_down_for + 3) * 1e9))
                for k in kills
                if k.leg == leg
            ]
            report["wire_survey"] = wire.survey(leg, report.pop("silences", []), windows)
    return Result(
        plan,
        elapsed,
        tuple(kills),
        seen["contenders"],
        group,
        sessions,
        seen["lapped"],
        slow_consumers,
    )


def _scaled(ns: float | None) -> float | None:
    return None if ns is None else ns / 1000


def _ns(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ns"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} us"


def summary(result: Result) -> str:
    """The verdict and a line per contender and leg, for the terminal."""
    lines = [
        "verdict: "
        + (
            "OK: the group lost nothing and repeated nothing"
            if result.ok
            else "NOT OK: " + "; ".join(result.problems())
        ),
        f"{len(result.kills)} kills in {result.elapsed:.0f} s at {result.plan.rate:.0f} msg/s "
        f"(the simulator made {result.sent_rate:.0f} msg/s, dropped {result.slow_consumers} "
        "connections as slow consumers); the reader was lapped by "
        f"{result.lapped} records (not the group's gaps); arbitration "
        f"{_ns(result.group.get('arbitration_ns_per_frame'))} a frame (median, in C); due "
        f"holes held for a kernel leg's unread bytes: {result.group.get('unread_waits', 0)}",
    ]
    group = result.contenders[GROUP_CONTENDER]
    if group["lost"]:
        brought = group.get("lost_brought_by_a_leg", 0)
        lines.append(
            f"  the group's {group['lost']} lost: {brought} brought by a leg (the hold gave up: "
            f"false losses), {group['lost'] - brought} by no leg (real holes)"
        )
        for line, wire in zip(
            group.get("false_loss_detail", []), group.get("wire_detail", []), strict=False
        ):
            lines.extend((f"    {line}", f"      wire: {wire}"))
    for sid, _, _ in (LEG_A, LEG_B):
        survey = result.contenders.get(LEG_CONTENDERS[sid], {}).get("wire_survey", [])
        lines.extend(f"  {line}" for line in survey)
    for name, c in result.contenders.items():
        lines.append(
            f"  {name:15} sent {c['expected']} delivered {c['delivered']} lost {c['lost']} "
            f"({c['gap_lost']} counted by its gap records) duplicated {c['duplicated']} gaps "
            f"{c['gaps']} latency p50 "
            f"{_us(c['latency_p50_us'])} p99 {_us(c['latency_p99_us'])} max "
            f"{_us(c['latency_max_us'])}; send->gateway RX p50 {_us(c['arrival_p50_us'])} "
            f"p99 {_us(c['arrival_p99_us'])}"
        )
    for leg in result.group.get("legs", []):
        name = next(n for sid, n, _ in SESSIONS if sid == leg["session_id"])
        lag50, lag99 = (
            leg[k] / 1000 if leg[k] is not None else None for k in ("lag_p50_ns", "lag_p99_ns")
        )
        reconnects = result.sessions.get(name, {}).get("reconnects", 0)
        lines.append(
            f"    leg {name} won {leg['won']} late {leg['late']} lag p50 {_us(lag50)} p99 "
            f"{_us(lag99)} (its latest {LAG_SAMPLES} late copies; p99 through the run: "
            f"median {_us(_scaled(leg.get('lag_p99_median_ns')))} worst "
            f"{_us(_scaled(leg.get('lag_p99_worst_ns')))}) downs {leg['downs']} "
            f"reconnects {reconnects:.0f}"
        )
    return "\n".join(lines)


def _measurements(result: Result) -> list[Measurement]:
    out: list[Measurement] = [
        Measurement(
            SCENARIO,
            "verdict (1 = ok)",
            GROUP_CONTENDER,
            "",
            True,
            [1.0 if result.ok else 0.0],
            note="; ".join(result.problems())
            or f"0 lost, 0 duplicated; {len(result.kills)} kills in {result.elapsed:.0f} s",
        )
    ]
    figures: tuple[tuple[str, str, str, bool, float], ...] = (
        ("messages delivered", "delivered", "count", True, 1.0),
        ("messages lost", "lost", "count", False, 1.0),
        ("messages duplicated", "duplicated", "count", False, 1.0),
        ("gaps", "gaps", "count", False, 1.0),
        ("latency send->consumer p50", "latency_p50_us", "us", False, 1.0),
        ("latency send->consumer p99", "latency_p99_us", "us", False, 1.0),
        ("latency send->gateway RX p50", "arrival_p50_us", "us", False, 1.0),
        ("latency send->gateway RX p99", "arrival_p99_us", "us", False, 1.0),
    )
    legs = tuple(LEG_CONTENDERS.values())
    for metric, key, unit, higher, scale in figures:
        for name in (SINGLE_CONTENDER, GROUP_CONTENDER, *legs):
            # a leg's own stream: only its send -> arrival (its losses are the group's to hide)
            if name not in result.contenders or (name in legs and not key.startswith("arrival")):
                continue
            value = result.contenders[name][key]
            out.append(
                Measurement(
                    SCENARIO,
                    metric,
                    name,
                    unit,
                    higher,
                    [] if value is None else [float(value) * scale],
                    reference=name == SINGLE_CONTENDER,
                )
            )
    for leg in result.group.get("legs", []):
        name = next(f"leg {n} ({t})" for sid, n, t in SESSIONS if sid == leg["session_id"])
        for metric, key, unit, scale in (
            ("leg won", "won", "count", 1.0),
            ("leg late", "late", "count", 1.0),
            ("leg lag p50", "lag_p50_ns", "us", 1e-3),
            ("leg lag p99", "lag_p99_ns", "us", 1e-3),
            ("leg lag p99 through the run, median", "lag_p99_median_ns", "us", 1e-3),
            ("leg lag p99 through the run, worst", "lag_p99_worst_ns", "us", 1e-3),
        ):
            value = leg.get(key)
            samples = [] if value is None else [float(value) * scale]
            out.append(Measurement(SCENARIO, metric, name, unit, False, samples))
    return out


@scenario(
    SCENARIO,
    "a 2-leg feed group vs a single session, a leg killed every 10 s: lost, duplicated, latency",
    needs_root=True,
    in_all=False,
)
def failover(options: BenchOptions) -> list[Measurement]:
    log = scenario_log(SCENARIO)
    result = run_failover(plan_for(options), unique_lab_name(options, "fo"), log)
    report_run(options, SCENARIO, summary(result), result.as_dict(), log)
    return _measurements(result)
