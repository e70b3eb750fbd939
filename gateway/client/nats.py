"""The bus transport: a gateway's messages on NATS (gateway.hub.nats publishes them), core
NATS or a JetStream stream, read into the same events as the ring.

Subjects are `<prefix>.<session>.<topic token>` (gateway.hub.names). A message becomes a
`RingMessage` with the ring's topic name (`<session>:<topic>`) and topic_id -1; its seq and
stamp are the gateway's when the sink adds headers (`NatsConfig.headers`), else 0. Gap events
(`<prefix>.<session>.$gap`) arrive as on the ring: messages of the `$gap` topic with the gap's
JSON, which carries the gateway's epoch; a gap of another epoch than the last one seen comes
after a `Restart`. Core NATS keeps nothing: what is published while the consumer is away is
not delivered, and the first message after the reader's reconnect comes behind a `Gap` (of
the ring sequences in between with the sink's headers, else Gap(0, 0): how many is not
known). JetStream stores it: `start_seq` resumes at a stream sequence (keep
`position`, the stream sequence of the last message delivered, and pass position + 1); if
the stream's limits removed messages from there, a `Gap` of the stream sequences removed
comes before the first message (every subject's, as a durable's below).

A durable consumer (`durable="name"`) keeps its place on the server instead: the source acks
what `read` hands over (ack="read": before read returns, confirmed by the server, so a
message is handed to a durable at most once, and a process killed between that ack and its
handling of the batch loses the batch; ack="next": when the caller reads again or closes, so
what it held when it died comes again: at least once), and a source opened again
under the name, in this process or after a kill -9 of another, resumes right after the last
acknowledged message, in stream order: the consumer is recreated at its ack floor when it had
delivered more than was acknowledged (the server would otherwise redeliver those only after
ack_wait, behind newer ones). If the stream's limits removed messages the durable had not
read yet, a `Gap` in stream sequences comes where they were: first when they went while no
reader was open, and while one reads (it fell behind the limits: MAX_QUEUED unread, then the
stream removed what it had not fetched) when the stream sequence of what it fetches jumps
past the stream's first sequence (one stream info per fetch with a jump). `lost` counts the
stream sequences removed, every subject's: JetStream does not say which subjects its limits
removed, so a reader of one session whose next message comes after the limits removed only
other sessions' messages (a quiet session in a busy stream) gets a Gap too. A Gap may so be
a loss that was not; a loss is never silent. One reader per durable name at a time.

Several copies of one upstream message (a stale fleet owner, a second leg, a resend) carry
one `Nats-Msg-Id`, and the stream keeps the first one stored within its duplicate window,
whichever generation published it. Consumers keep that copy: a consumer that drops messages
by an older `Wsgw-Gen` header would drop the only copy stored. The source does not look at
`Wsgw-Gen`.

Core NATS over nats:// is read in the consumer's own thread (gateway.client.nats_core): one
wake-up a batch, a parse a message. JetStream and TLS use nats-py, which is asyncio only: it
runs on a loop of its own in a thread of its own, and hands each message over through a
condition variable, so the Client's sync and async reads work as with the other transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from dataplane.ring import WAIT_AUTO, Gap, RingMessage, WaitPolicy
from gateway.client.core import (
    ClientEvent,
    NetworkSource,
    Restart,
    SourceUnavailableError,
    parse_wait,
)
from gateway.client.nats_core import (
    MAX_SUBJECTS_KEPT,
    CoreNatsSubscriber,
    NatsMsg,
    NatsNeedsLibraryError,
    NatsProtocolError,
    NatsReconnected,
    NatsServerError,
    number_or_zero,
)
from gateway.hub.names import (
    NATS_GAP_TOKEN,
    RING_GAP_TOPIC,
    ring_topic,
    topic_from_token,
    topic_token,
)

#: How long connecting (and subscribing) may take before the bus counts as unavailable.
CONNECT_TIMEOUT = 5.0
#: A durable's pull: messages per fetch, how long one waits on the server, and how many the
#: source holds unread before it stops fetching (the server's max_ack_pending is above it).
FETCH_BATCH = 512
FETCH_WAIT_S = 1.0
MAX_QUEUED = 8192
MAX_ACK_PENDING = 4 * MAX_QUEUED
#: How long the server waits for a durable's ack before it delivers the message again.
ACK_WAIT_S = 30.0
#: How long an ack may wait for the server's confirmation.
ACK_TIMEOUT_S = 5.0
#: The sink's headers a core NATS read takes as (seq, recv_ts) numbers (gateway.hub.nats).
CORE_NUMBERS = (b"Wsgw-Seq", b"Wsgw-Recv-Ts")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
AckMode = Literal["read", "next"]


@dataclass
class CoreContinuity:
    """Whether core NATS lost messages across a reconnect (it keeps nothing meanwhile), told
    by the first message after it: with the sink's headers, the ring sequences between the
    last message before and that one (every topic's, as the ring's Gap counts; none when
    nothing is missing); without them, or with no message before, Gap(0, 0): how many were
    lost is not known."""

    last_seq: int = 0
    resumed: bool = False  # a reconnect since the last message

    def gap_before(self, seq: int) -> Gap | None:
        """The Gap to hand over before a message with this Wsgw-Seq (0: none), if any."""
        gap = None
        if self.resumed:
            self.resumed = False
            last = self.last_seq
            if not (seq and last):
                gap = Gap(0, 0)
            elif seq > last + 1:
                gap = Gap(seq - last - 1, last + 1)
        if seq:
            self.last_seq = seq
        return gap


class NatsSource(NetworkSource):
    """Messages of one session (or every session) from a NATS server."""

    _stream_at: tuple[Any, str] | None = None  # JetStream: js, stream
    #: A reader without a durable opened at start_seq: that sequence, until its first
    #: message (a later one: the stream's limits may have removed what was there).
    _start_check: int | None = None
    #: A durable's: the stream's creation time seen at its open, and whether the durable is
    #: to be looked for before the next fetch (the reader reconnected, or a fetch failed).
    _stream_created: object = None
    _recheck = False
    #: Without a durable: the ordered consumer's subscription, made again after a reconnect.
    _ordered: Any = None
    _fetcher: asyncio.Task[None] | None = None  # a durable's pulls

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "wsgw",
        session: int | None = None,
        topics: Iterable[str] | None = None,
        jetstream: str | None = None,
        start_seq: int | None = None,
        epoch: int | None = None,
        token: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        name: str | None = None,
        durable: str | None = None,
        ack: AckMode = "read",
        ack_wait: float = ACK_WAIT_S,
        wait: WaitPolicy | str | None = WAIT_AUTO,
    ) -> None:
        """url: nats://host:port (comma-separated for several servers). topics: upstream
        topics of `session` (None: all). jetstream: the stream's name, to read what it stored
        (from start_seq, else only what comes from now on). epoch: the run the consumer saw
        last, so that a gap of another run comes after a Restart. durable: a durable
        consumer's name (module doc); start_seq then applies only when it is created.
        name: the connection's name, as the server's monitoring (/connz) shows it.
        wait: how the core reader waits (Client's module doc; "auto": the default, core
        NATS carries no recommendation); nats-py's path (JetStream, TLS) sleeps."""
        self._choose_wait(parse_wait(wait))
        _check_options(session, topics, jetstream, start_seq, durable, ack)
        self.durable = durable
        self.ack = ack
        self.ack_wait = ack_wait
        self.prefix = prefix
        self.session = session
        self.subject = f"{prefix}.{session if session is not None else '*'}.*"
        self._tokens = None if topics is None else {topic_token(t) for t in topics}
        self._epoch = epoch or 0
        self._places: dict[str, tuple[int, str | None]] = {}  # subject: session, topic
        self._continuity = CoreContinuity()  # core NATS: a reconnect's Gap
        self.position: int | None = None  # JetStream sequence of the last message delivered
        self._events: deque[ClientEvent] = deque()
        # Per event: its JetStream message (None: none, or not to ack) and stream sequence.
        self._js_msgs: deque[tuple[Any, int | None]] = deque()
        self._highest = 0  # a durable's highest stream sequence taken (redeliveries: older)
        self._unacked: Any = None  # ack="next": the last message handed over, not acked yet
        self._tasks: set[asyncio.Task[None]] = set()  # _reorder's
        self._durable_at: tuple[Any, str, str] | None = None  # js, stream, durable name
        self._saved_epoch = 0  # the run the durable's description remembers
        self._closing = False
        self.acked: int | None = None  # a durable's last stream sequence the server confirmed
        self.ack_failures = 0
        self.last_ack_error: str | None = None
        self._cond = threading.Condition()
        self._interrupted = False
        self._ended = False
        self._name = name
        self._core: CoreNatsSubscriber | None = None
        if jetstream is None and self._open_core(url, token, connect_timeout):
            return
        self._loop = asyncio.new_event_loop()
        self._nc: Any = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="wsgw-client-nats")
        self._thread.daemon = True
        self._thread.start()
        opening = asyncio.run_coroutine_threadsafe(
            self._open(url, jetstream, start_seq, token, connect_timeout), self._loop
        )
        try:
            opening.result(connect_timeout + 1.0)
        except Exception as exc:
            self.close()
            raise SourceUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from exc

    def _open_core(self, url: str, token: str | None, timeout: float) -> bool:
        """Core NATS read in this thread; False: the server needs nats-py (TLS)."""
        try:
            self._core = CoreNatsSubscriber(
                url.split(","),
                self._core_subjects(),
                token=token,
                name=self._name,
                connect_timeout=timeout,
                numbers=CORE_NUMBERS,
            )
        except NatsNeedsLibraryError:
            return False
        except (OSError, NatsServerError, NatsProtocolError) as exc:
            raise SourceUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from exc
        return True

    def _core_subjects(self) -> list[str]:
        """The subjects to subscribe to: the session's topics asked for and its gap records
        (the server filters), else every topic."""
        if self._tokens is None:
            return [self.subject]
        session = f"{self.prefix}.{self.session}"
        return [f"{session}.{token}" for token in sorted(self._tokens)] + [
            f"{session}.{NATS_GAP_TOKEN}"
        ]

    async def _open(
        self,
        url: str,
        jetstream: str | None,
        start_seq: int | None,
        token: str | None,
        timeout: float,
    ) -> None:
        import nats

        async def closed() -> None:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

        async def reconnected() -> None:  # on this loop, as _on_message
            self._continuity.resumed = True
            self._recheck = True  # a durable: is it (and its stream) still there?
            if self._ordered is not None:  # its consumer may be gone with the server
                task = asyncio.get_running_loop().create_task(self._reorder())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        self._nc = await nats.connect(
            servers=url.split(","),
            token=token,
            name=self._name,
            connect_timeout=timeout,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            closed_cb=closed,
            reconnected_cb=reconnected,
        )
        if jetstream is None:
            await self._nc.subscribe(self.subject, cb=self._on_message)
            return
        js = self._nc.jetstream()
        self._stream_at = (js, jetstream)
        if self.durable is not None:
            await self._open_durable(js, jetstream, self.durable, start_seq)
            return
        info = await js.stream_info(jetstream)
        self._stream_created = info.created
        self._start_check = start_seq
        start = start_seq if start_seq is not None else info.state.last_seq + 1  # new ones
        self._highest = max(start, 1) - 1
        self._ordered = await self._subscribe_ordered(js, jetstream, start)

    async def _subscribe_ordered(self, js: Any, stream: str, start: int) -> Any:
        """An ordered consumer (no durable) from stream sequence `start`."""
        from nats.js.api import ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(start, 1)
        )
        return await js.subscribe(
            self.subject, stream=stream, cb=self._on_message, ordered_consumer=True, config=config
        )

    async def _reorder(self) -> None:
        """After a reconnect, without a durable: the ordered consumer made again after the
        last message it got (the server's restart took its consumer), behind a Gap of what
        the limits removed meanwhile; from the first message of a stream that began again
        (its creation time changed), behind Gap(0, 0). Messages the old one still brings
        are taken once (by stream sequence). Tries until the stream is there again."""
        assert self._stream_at is not None
        js, stream = self._stream_at
        while not self._closing:
            try:
                info = await js.stream_info(stream)
                start = self._highest + 1
                if info.created != self._stream_created:
                    start = max(info.state.first_seq, 1)
                    self._queue_unackable(Gap(0, 0))
                    self._highest = start - 1
                    self._stream_created = info.created
                else:
                    self._start_check = start
                old, self._ordered = self._ordered, None
                with contextlib.suppress(Exception):
                    await old.unsubscribe()
                self._ordered = await self._subscribe_ordered(js, stream, start)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.2)  # the stream is not back yet

    async def _open_durable(self, js: Any, stream: str, name: str, start_seq: int | None) -> None:
        """Bind to the durable (made here the first time), at its ack floor, and pull.

        A durable is always made with an explicit start sequence (a new one: after the
        stream's last message), so that where it started is known before its first ack."""
        from nats.js.errors import NotFoundError

        try:
            info = await js.consumer_info(stream, name)
        except NotFoundError:
            info = None
        stream_info = await js.stream_info(stream)
        self._stream_created = stream_info.created
        state = stream_info.state
        if info is None:
            start = start_seq if start_seq is not None else state.last_seq + 1
            await js.add_consumer(stream, self._durable(name, start))
            self._highest = max(start, 1) - 1
        else:
            given = info.config.filter_subject
            if given != self.subject:
                raise ValueError(f"durable {name!r} reads {given}, not {self.subject}")
            remembered = _epoch_of(info.config.description)
            self._saved_epoch = remembered
            if not self._epoch:  # the run this durable's reader last acked a gap of
                self._epoch = remembered
            acked = info.ack_floor is not None and info.ack_floor.consumer_seq > 0
            floor = info.ack_floor.stream_seq if acked else (info.config.opt_start_seq or 1) - 1
            delivered = info.delivered.stream_seq if info.delivered is not None else 0
            first = state.first_seq
            if first > floor + 1:  # the stream's limits removed what it had not acked
                self._events.append(Gap(first - floor - 1, floor + 1))
                self._js_msgs.append((None, None))
            if delivered > floor:  # handed to a reader that did not ack: from the floor
                await js.delete_consumer(stream, name)
                start = max(floor + 1, first)
                await js.add_consumer(stream, self._durable(name, start, remembered))
            self._highest = max(floor, first - 1)  # what went before: the Gap above
        self._durable_at = (js, stream, name)
        sub = await js.pull_subscribe_bind(durable=name, stream=stream)
        self._fetcher = asyncio.get_running_loop().create_task(self._fetch(sub))

    def _durable(self, name: str, start: int, epoch: int = 0) -> Any:
        """The durable's consumer config: from stream sequence `start`, ack all; its
        description remembers the gateway run of the last gap record acked."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        return ConsumerConfig(
            durable_name=name,
            description=_epoch_text(epoch),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(start, 1),
            ack_policy=AckPolicy.ALL,
            ack_wait=self.ack_wait,
            max_ack_pending=MAX_ACK_PENDING,
            filter_subject=self.subject,
        )

    async def _rewind(self) -> None:
        """Closing with messages fetched but not handed over: the durable starts again
        right after the last ack, so the server counts those as unread (a Gap if its
        limits remove them before the next reader comes)."""
        if self._durable_at is None or self._highest <= (self.acked or 0):
            return
        js, stream, name = self._durable_at
        info = await js.consumer_info(stream, name)
        acked = info.ack_floor is not None and info.ack_floor.consumer_seq > 0
        floor = info.ack_floor.stream_seq if acked else (info.config.opt_start_seq or 1) - 1
        await js.delete_consumer(stream, name)
        await js.add_consumer(stream, self._durable(name, floor + 1, self._saved_epoch))

    async def _save_epoch(self, epoch: int) -> None:
        """Write the run of the last gap record handed over into the durable's description,
        so that its next reader, in another process, knows it (a Restart when it changed)."""
        if self._durable_at is None:
            return
        js, stream, name = self._durable_at
        config = (await js.consumer_info(stream, name)).config
        config.description = _epoch_text(epoch)
        await js.add_consumer(stream, config)  # an update: only the description differs

    async def _fetch(self, sub: Any) -> None:
        """Pull while fewer than MAX_QUEUED wait to be read; nats-py reconnects meanwhile."""
        from nats.errors import TimeoutError as NatsTimeoutError

        while not self._closing:
            if len(self._events) >= MAX_QUEUED:
                await asyncio.sleep(0.005)
                continue
            try:
                if self._recheck:
                    sub = await self._ensure_durable(sub)
                    self._recheck = False
                msgs = await sub.fetch(FETCH_BATCH, timeout=FETCH_WAIT_S)
            except (TimeoutError, NatsTimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._closing:
                    return
                self._recheck = True
                await asyncio.sleep(0.2)  # disconnected: nats-py reconnects
                continue
            await self._hand_over(msgs)

    async def _ensure_durable(self, sub: Any) -> Any:
        """After a reconnect or a failed fetch: the durable's pull subscription, made again
        (at what this reader took) when the durable is gone. Its stream made again (a memory
        stream after the server's restart, one deleted and made again): from the new
        stream's first message, behind Gap(0, 0) (how many went with the old one is not
        known). Raises while the stream is not there (again) yet."""
        from nats.js.errors import NotFoundError

        assert self._durable_at is not None
        js, stream, name = self._durable_at
        try:
            await js.consumer_info(stream, name)
            return sub
        except NotFoundError:
            pass
        info = await js.stream_info(stream)
        first = info.state.first_seq
        lost: Gap | None = None
        if info.created != self._stream_created:
            lost = Gap(0, 0)
            self._highest = max(first, 1) - 1
            self.acked = None
        elif first > self._highest + 1:  # its limits removed what was not taken
            lost = Gap(first - self._highest - 1, self._highest + 1)
            self._highest = first - 1
        if lost is not None:
            self._queue_unackable(lost)
        await js.add_consumer(stream, self._durable(name, self._highest + 1, self._saved_epoch))
        self._stream_created = info.created
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        return await js.pull_subscribe_bind(durable=name, stream=stream)

    def _queue_unackable(self, event: ClientEvent) -> None:
        """An event of this reader's own (a Gap): queued for read, with no message to ack."""
        with self._cond:
            self._events.append(event)
            self._js_msgs.append((None, None))
            self._cond.notify_all()

    async def _hand_over(self, msgs: list[Any]) -> None:
        """A fetched batch, with a Gap before a message the stream sequence of which jumps
        past what the stream's limits removed while this reader was behind."""
        first = 0
        previous = self._highest
        for msg in msgs:
            stream_seq = msg.metadata.sequence.stream
            if stream_seq > previous + 1:
                first = await self._stream_first()
                break
            previous = max(previous, stream_seq)
        for msg in msgs:
            stream_seq = msg.metadata.sequence.stream
            missed = self._highest + 1
            if first > missed and stream_seq > missed:
                self._queue_unackable(Gap(min(first, stream_seq) - missed, missed))
                self._highest = min(first, stream_seq) - 1
            await self._on_message(msg)

    async def _stream_first(self) -> int:
        """The stream's first sequence now (0: unknown)."""
        if self._stream_at is None:
            return 0
        js, stream = self._stream_at
        try:
            return int((await js.stream_info(stream)).state.first_seq)
        except Exception:
            return 0

    async def _on_message(self, msg: Any) -> None:
        is_js = _is_js(msg)
        stream_seq = msg.metadata.sequence.stream if is_js else None
        if stream_seq is not None:
            if stream_seq <= self._highest:
                return  # redelivered (ack_wait passed while it waited), or an old consumer's
            self._highest = stream_seq
        removed = None
        if self._start_check is not None and stream_seq is not None:
            removed = await self._removed_before(self._start_check, stream_seq)
        headers = msg.headers or {}
        seq = number_or_zero(headers.get("Wsgw-Seq"))
        ts = number_or_zero(headers.get("Wsgw-Recv-Ts"))
        events = self._events_of(msg.subject, seq, ts, msg.data)
        gap = None if is_js else self._continuity.gap_before(seq)
        if gap is not None:
            events.insert(0, gap)
        if removed is not None:
            events.insert(0, removed)
        if not events:
            return  # a durable acks it with the next one handed over (ack policy all)
        ackable = msg if self.durable is not None else None
        with self._cond:
            for event in events[:-1]:  # a Restart before the gap
                self._events.append(event)
                self._js_msgs.append((None, None))
            self._events.append(events[-1])
            self._js_msgs.append((ackable, stream_seq))
            self._cond.notify_all()

    async def _removed_before(self, start: int, stream_seq: int) -> Gap | None:
        """The first message of a reader opened at stream sequence `start`: a Gap when the
        stream's limits removed what was stored from `start` on (it starts at its first
        sequence then), as a durable's open tells it; every subject's, as there."""
        self._start_check = None
        if stream_seq <= start:
            return None
        first = await self._stream_first()
        if first <= start:
            return None  # stream sequences of other subjects in between: no loss
        return Gap(min(first, stream_seq) - start, start)

    def _events_of(self, subject: str, seq: int, ts: int, data: bytes) -> list[ClientEvent]:
        """A bus message as the ring's events: [] for a topic not asked for; a gap record of
        another run than the last one seen comes after a Restart."""
        place = self._places.get(subject)
        if place is None:
            place = self._place_of(subject)
        sid, topic = place
        if topic is None:
            return []
        if topic != RING_GAP_TOPIC:
            return [RingMessage(seq, sid, topic, ts, data, -1)]
        events: list[ClientEvent] = []
        body = _gap_body(data)
        epoch = _hex_int(body.get("epoch"))
        if epoch and epoch != self._epoch:
            if self._epoch:
                events.append(Restart(self._epoch, epoch))
            self._epoch = epoch
        gap_seq = _json_int(body, "seq") or seq
        gap_ts = _json_int(body, "ts_ns") or ts
        events.append(RingMessage(gap_seq, sid, RING_GAP_TOPIC, gap_ts, data, -1))
        return events

    def _place_of(self, subject: str) -> tuple[int, str | None]:
        """A subject's session and ring topic name (None: a topic not asked for), kept."""
        _, sid_text, token = subject.rsplit(".", 2)
        if not sid_text.isdigit():  # not a subject the sink writes: another publisher's
            return (0, None)
        sid = int(sid_text)
        if token == NATS_GAP_TOKEN:
            place: tuple[int, str | None] = (sid, RING_GAP_TOPIC)
        elif self._tokens is not None and token not in self._tokens:
            place = (sid, None)
        else:
            place = (sid, ring_topic(sid, topic_from_token(token)))
        if len(self._places) >= MAX_SUBJECTS_KEPT:
            self._places.clear()
        self._places[subject] = place
        return place

    def _read_core(
        self, core: CoreNatsSubscriber, max: int, timeout: float | None
    ) -> list[ClientEvent]:
        """Core NATS: the subscriber's messages as events, read in this thread (its
        subscriptions are the topics asked for: the server filtered them). After a
        reconnect, a Gap before the first message (core NATS kept nothing meanwhile)."""
        events: list[ClientEvent] = []
        continuity = self._continuity
        for msg in core.read(max, timeout, self._policy_spin_s):
            if type(msg) is NatsReconnected:
                continuity.resumed = True
                continue
            assert type(msg) is NatsMsg
            seq, ts = msg.numbers  # CORE_NUMBERS, read while scanning
            gap = continuity.gap_before(seq)
            if gap is not None:
                events.append(gap)
            events.extend(self._events_of(msg.subject, seq, ts, msg.payload))
        return events

    # ---- MessageSource ------------------------------------------------------------------
    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        """Up to max events; a durable acks them (ack="read") or the previous ones
        (ack="next") first."""
        if self._core is not None:
            return self._read_core(self._core, max or 1024, timeout)
        if self._unacked is not None:
            self._ack(self._unacked)
            self._unacked = None
        last: Any = None
        with self._cond:
            if not self._events and timeout != 0:
                self._wait_locked(timeout)
            limit = min(max or 1024, len(self._events))
            events = [self._events.popleft() for _ in range(limit)]
            for _ in range(limit):
                msg, stream_seq = self._js_msgs.popleft()
                if stream_seq is not None:
                    self.position = stream_seq
                if msg is not None:
                    last = msg
        if last is not None:
            if self.ack == "read":
                self._ack(last)
            else:
                self._unacked = last
            self._remember_epoch(events)
        return events

    def _remember_epoch(self, events: list[ClientEvent]) -> None:
        """A durable: the run of the last gap record handed over, saved when it changed."""
        epoch = 0
        for event in events:
            if type(event) is RingMessage and event.topic == RING_GAP_TOPIC:
                epoch = _hex_int(_gap_body(event.payload).get("epoch")) or epoch
        if not epoch or epoch == self._saved_epoch or self._loop.is_closed():
            return
        saving = asyncio.run_coroutine_threadsafe(self._save_epoch(epoch), self._loop)
        try:
            saving.result(ACK_TIMEOUT_S + 1.0)
            self._saved_epoch = epoch
        except Exception as exc:
            self.last_ack_error = f"saving the run: {type(exc).__name__}: {exc}"

    def _ack(self, msg: Any) -> None:
        """Ack msg and every message before it (ack policy all), confirmed by the server.
        Not confirmed (the bus is away): they come again to the next reader of the durable."""
        if self._loop.is_closed():
            return
        acking = asyncio.run_coroutine_threadsafe(msg.ack_sync(timeout=ACK_TIMEOUT_S), self._loop)
        try:
            acking.result(ACK_TIMEOUT_S + 1.0)
            self.acked = msg.metadata.sequence.stream
        except Exception as exc:
            self.ack_failures += 1
            self.last_ack_error = f"{type(exc).__name__}: {exc}"

    def _wait_locked(self, timeout: float | None) -> bool:
        self._interrupted = False
        return self._cond.wait_for(
            lambda: bool(self._events) or self._ended or self._interrupted, timeout
        ) and bool(self._events)

    @property
    def epoch(self) -> int:
        """The gateway's run, from the last gap event seen (0: none seen yet)."""
        return self._epoch

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        if self._core is not None:
            return self._core.wait(timeout, self._spin_s(spin))
        with self._cond:
            return bool(self._events) or self._wait_locked(timeout)

    def interrupt(self) -> None:
        if self._core is not None:
            self._core.interrupt()
            return
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        if self._core is not None:
            return self._core.closed
        with self._cond:
            return self._ended and not self._events

    async def _shutdown(self) -> None:
        """Close the connection, then end what nats-py left running (JetStream's checks)."""
        self._closing = True
        if self._fetcher is not None:
            self._fetcher.cancel()
            await asyncio.gather(self._fetcher, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._rewind(), ACK_TIMEOUT_S)
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
        current = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def close(self) -> None:
        """Close; with ack="next", what was handed over is acked first (it was handled)."""
        if self._core is not None:
            self._core.close()
            return
        if self._unacked is not None:
            self._ack(self._unacked)
            self._unacked = None
        if not self._loop.is_closed():
            closing = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            with contextlib.suppress(Exception):
                closing.result(5.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
            self._loop.close()
        with self._cond:
            self._ended = True
            self._cond.notify_all()


_EPOCH_PREFIX = "wsgw run "


def _epoch_text(epoch: int) -> str | None:
    return f"{_EPOCH_PREFIX}{epoch:016x}" if epoch else None


def _epoch_of(description: str | None) -> int:
    """The run a durable's description remembers (0: none)."""
    if not description or not description.startswith(_EPOCH_PREFIX):
        return 0
    return _hex_int(description[len(_EPOCH_PREFIX) :])


def _check_options(
    session: int | None,
    topics: Iterable[str] | None,
    jetstream: str | None,
    start_seq: int | None,
    durable: str | None,
    ack: str,
) -> None:
    """NatsSource's options that cannot work together: ValueError before connecting."""
    if topics is not None and session is None:
        raise ValueError("topics need a session (subjects are per session)")
    if start_seq is not None and jetstream is None:
        raise ValueError("start_seq needs jetstream: core NATS keeps no messages")
    if durable is not None and jetstream is None:
        raise ValueError("durable needs jetstream: core NATS keeps no consumers")
    if durable is not None and not _NAME.fullmatch(durable):
        raise ValueError(f"durable {durable!r}: letters, digits, '_' or '-'")
    if ack not in ("read", "next"):
        raise ValueError(f"ack {ack!r}: read or next")


def _gap_body(data: bytes | memoryview) -> dict[str, Any]:
    """A gap record's JSON ({} for a payload that is not a JSON object: the record is still
    handed over, without the run and numbers it would carry)."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


def _json_int(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    return value if type(value) is int else 0


def _hex_int(value: object) -> int:
    """A run id as the sink writes it (hex text); 0 for anything else."""
    if not isinstance(value, str):
        return 0
    try:
        return int(value, 16)
    except ValueError:
        return 0


def _is_js(msg: Any) -> bool:
    """Whether msg came from JetStream (its reply subject is the ack subject `$JS.ACK...`)."""
    return bool(msg.reply) and str(msg.reply).startswith("$JS.ACK.")
