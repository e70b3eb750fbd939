"""The gateway's normalizer and local books: a ring follower of its own, beside the feed.

Sessions publish raw messages only, and on the C feed path (dpdk sessions, `feed_path c`)
no Python sees a message between the wire and the ring. So normalization is not a step of
the session: the BookManager is one more reader of the hub's ring, on a thread of its own,
filtered to the upstream topics that a normalized subscription holds (and the `$gap`
records). Raw consumers keep the feed path as it was, whatever the normalized ones cost.

For each message it runs the session venue's normalizer (gateway.normalize.venues) and
publishes every event back to the hub as the session's topic `norm:<topic>` (JSON) or
`normbin:<topic>` (binary, gateway.hub.names.normalized_topic), one event per message, with
the raw message's receive stamp. Book events go through a BookSync per (session, topic,
symbol) first, and only what keeps a consumer's book right is published:

- a snapshot or delta the book took (APPLIED); buffered and ignored deltas are not;
- when the book is found wrong (RESYNC: gap, checksum, stale snapshot, no snapshot) a
  `reset` event (BookReset, with the reason), then a new snapshot is asked for: REST for
  Binance and Bitstamp (`<base>/api/v3/depth?symbol=S&limit=N`, `<base>/api/v2/order_book/
  <pair>/`; the bases are settings, so a simulator can serve them), a resubscribe of the
  topic for the others (their venues send a snapshot on subscribe). Binance USD-M futures
  books (their deltas carry `pu`) fetch `<base>/fapi/v1/depth`, base `binance_futures` (or
  `binance`'s when that is not set). A REST snapshot that
  the book took is published as a `snapshot` event of the book as it then is (the snapshot
  plus the buffered deltas that follow it), with its sequence;
- a session's `$gap` (a reconnect, a message the ring could not hold) makes its books stale
  too (reason `upstream_gap`): a REST book fetches again, the others wait for the snapshot
  the resubscribe after the reconnect brings;
- a book waiting for its venue's snapshot that gets updates and no snapshot (a resubscribe's
  snapshot lost or never sent) resubscribes again, with backoff, until one comes.

Periodic snapshots (`set_snapshots`, PUT /v1/books/{session}/snapshots): every
`interval_s`, each synced book of the session is published as a `snapshot` event of its top
`depth` levels (None: the whole book) with the book's sequence, in ring order with its
deltas: a consumer who joins late takes the first snapshot as its book and applies the
deltas that follow it. A depth-N snapshot makes exact the prices from the best to the Nth
level; the deltas keep every price they name exact (sizes are absolute).

Feed-group legs (issue #19): a leg's messages reach the ring only as its group's arbitrated
stream, under the group's hub id (gateway.groups.feed). A normalized subscription on a leg
(`set_session(..., source=hub id)`) has its books built from that stream, and only the
group's `$gap` (a message every leg lost) resets them: a leg that drops or reconnects does
not, since the other legs carry the stream on. The events go out under the leg's session id,
where the subscription's consumers read them. A book of a group's stream that resubscribes
(any reason: a checksum mismatch, a break the group did not see, the group's own gap) asks
the runtime first (`resync_group_topic`): the group restarts the topic, so the venue's
snapshot re-bases the arbiter's key where it would otherwise be dropped as a copy of what
the group already delivered (gateway.groups.arbiter, `restart`); for a topic whose frames
carry no exchange id (Kraken's book), which pass through from leg 0 only, leg 0 is the one
resubscribed.

REST snapshots go over the session's own transport: a running dpdk session's through its
engine, on its loop (the runtime's `snapshot_fetcher`, dataplane.transports.http), so a
venue reached only through the DPDK port serves its books too; the others through the
kernel (urllib). A failed fetch (nothing listens, a reset, a timeout, TLS, a non-200, a
truncated body) is retried with backoff. A normalized subscription of a REST venue's book
topic is refused at create only when books.snapshot_urls has no base for the venue
(`snapshot_unreachable`): nothing could ever sync its books.

The per-message path in C (`c_path`, on by default): books of the venues done in C
(gateway.books.book.C_VENUES) are C books, and the records of one ring read that belong to
one such book, in a row, go to dataplane/shim/book.c in one call (BookSync.on_raw_batch),
which applies them and hands back their normalized deltas already encoded; a message C
does not take goes through the normalizer and the Python rules in its turn, so the order of
what is published is the ring's. tests/integration/test_books_manager.py holds the two
paths to the same published bytes.

Resyncs are counted per (session, venue, reason) for /metrics. The books are read by
`GET /v1/books/{session}/{symbol}` (`view`). A ring overrun of this reader is a gap of every
session it follows. A deleted session's books and counts are forgotten (`forget_session`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from dataplane.errors import DataplaneError
from dataplane.ring import Gap, RingClosedError, RingError, RingReader
from dataplane.shim import BOOK_OUT_BINARY, BOOK_OUT_JSON
from gateway.books.book import C_VENUES
from gateway.books.sync import Action, BookSync, make_sync
from gateway.dialects.kraken import book_depth as kraken_book_depth
from gateway.hub.names import RING_GAP_TOPIC, normalized_topic, ring_topic
from gateway.normalize.schema import BookDelta, BookReset, BookSnapshot, Event, Level, encode
from gateway.normalize.venues import NORMALIZERS, Normalizer, make_normalizer

log = logging.getLogger("wsgw.books")

#: Venues whose book snapshot comes from REST (the others send one on subscribe).
REST_VENUES = ("binance", "bitstamp")
#: The reason of a reset that a session's `$gap` (or this reader's overrun) caused.
UPSTREAM_GAP = "upstream_gap"
#: Seconds between two snapshot requests of one book (a venue that keeps failing the
#: checks is not asked in a loop); doubled per failed fetch up to RESYNC_BACKOFF_MAX.
RESYNC_INTERVAL = 0.2
RESYNC_BACKOFF_MAX = 10.0
#: How long the reader waits for records before it looks at its other work (resyncs and
#: periodic snapshots are due at this grain, so it is also the shortest snapshot interval).
READ_TIMEOUT = 0.1


@dataclass(frozen=True)
class BooksConfig:
    """Where REST snapshots come from, and how deep (gateway.settings.BooksSettings)."""

    snapshot_urls: Mapping[str, str] = field(
        default_factory=lambda: {
            "binance": "https://api.binance.com",
            "binance_futures": "https://fapi.binance.com",
            "bitstamp": "https://www.bitstamp.net",
        }
    )
    snapshot_limit: int = 1000
    snapshot_timeout_s: float = 5.0
    #: Every session's periodic snapshots, unless set per session (None: none).
    periodic_interval_ms: int | None = None
    periodic_depth: int | None = None
    #: Books of the venues done in C take their deltas in C (the module docstring).
    c_path: bool = True


@dataclass(frozen=True)
class _Encoded:
    """A normalized event the C path already encoded in both encodings."""

    json: bytes
    binary: bytes


#: What the reader thread publishes: (session, topic, event or its encodings, stamp).
_Out = tuple[int, str, "Event | _Encoded", int]


class HubLike(Protocol):
    ring: Any

    def publish_batch(self, messages: Any) -> object: ...


class Resubscriber(Protocol):
    def subscribe(self, session_id: int, topics: Any) -> None: ...

    def unsubscribe(self, session_id: int, topics: Any) -> None: ...


@dataclass
class _Book:
    """One local book: its sync, where its events go, and its resync schedule."""

    session_id: int
    topic: str
    symbol: str
    sync: BookSync
    updated_ns: int = 0
    #: A REST fetch or a resubscribe is under way / due at this monotonic time (0: none).
    resync_due: float = 0.0
    fetching: bool = False
    failures: int = 0
    gap_resets: int = 0
    #: Binance USD-M futures (its deltas carry `pu`): the snapshot is /fapi/v1/depth's.
    futures: bool = False
    #: The next periodic snapshot is due at this monotonic time (0: at once).
    next_snapshot: float = 0.0


@dataclass(frozen=True)
class SnapshotPolicy:
    """A session's periodic book snapshots: every interval_s, the top `depth` levels a side
    (None: the whole book)."""

    interval_s: float
    depth: int | None = None

    def __post_init__(self) -> None:
        if not READ_TIMEOUT <= self.interval_s <= 3600:
            raise ValueError(f"interval_s {self.interval_s} is not in [{READ_TIMEOUT}, 3600]")
        if self.depth is not None and self.depth < 1:
            raise ValueError(f"depth {self.depth} is not >= 1")


class BooksBusy(Exception):
    """The books are being updated right now (BookManager.view with wait False)."""


@dataclass(frozen=True)
class BookView:
    """A book as GET /v1/books answers it."""

    session_id: int
    venue: str
    symbol: str
    topic: str
    seq: int
    stale: bool
    bids: list[Level]
    asks: list[Level]
    updated_ns: int
    resyncs: dict[str, int]
    last_reset: BookReset | None


@dataclass
class _Feed:
    """One session's normalized topics: upstream topic -> encodings wanted; `source`: the
    hub id whose ring stream they are made from (the session's own, or its feed group's)."""

    venue: str
    normalizer: Normalizer
    topics: dict[str, frozenset[str]]
    source: int


class BookManager:
    """See the module docstring. set_session from any thread; the rest runs on its own."""

    def __init__(
        self,
        hub: HubLike | None,
        runtime: Resubscriber | None,
        config: BooksConfig | None = None,
        *,
        fetch: Callable[[str, float], bytes] | None = None,
    ) -> None:
        self.hub = hub
        self.runtime = runtime
        self.config = config or BooksConfig()
        self._fetch = fetch or _http_get
        self._lock = threading.RLock()
        self._feeds: dict[int, _Feed] = {}
        #: ring name -> the (session, topic) pairs made from it (legs of one group share it)
        self._names: dict[str, list[tuple[int, str]]] = {}
        #: hub id -> the sessions whose books its `$gap` records make stale
        self._followers: dict[int, list[int]] = {}
        self._books: dict[tuple[int, str, str], _Book] = {}
        #: (session, topic) -> its books (the C path looks a record's book up per run)
        self._topic_books: dict[tuple[int, str], list[_Book]] = {}
        self._snapshot_policies: dict[int, SnapshotPolicy] = {}
        #: Every other session's (books.periodic_interval_ms / periodic_depth).
        self.default_snapshots = (
            SnapshotPolicy(self.config.periodic_interval_ms / 1000, self.config.periodic_depth)
            if self.config.periodic_interval_ms
            else None
        )
        self._snapshots: queue.SimpleQueue[tuple[_Book, bytes | None, int, str]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._reader: RingReader | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        #: (venue, reason) -> resyncs of books that are gone (kept in the totals).
        self._retired: Counter[tuple[int, str, str]] = Counter()
        self.published = 0
        self.periodic_snapshots = 0
        self.fetches: Counter[tuple[str, str]] = Counter()  # (venue, "ok" | "failed")
        #: Deltas the C path applied (the rest of the messages went through Python).
        self.c_applied = 0
        self._c_path = self.config.c_path and _book_c_available()

    @property
    def available(self) -> bool:
        """Whether there is a hub ring to follow (a detached runtime has none)."""
        return self.hub is not None and getattr(self.hub, "ring", None) is not None

    # ---- configuration (any thread) -----------------------------------------------------------
    def set_session(
        self,
        session_id: int,
        venue: str,
        topics: Mapping[str, set[str]],
        *,
        source: int | None = None,
    ) -> None:
        """The normalized topics of a session now (empty: none): upstream topic -> the
        encodings its normalized subscriptions want. Books of topics no longer wanted go.
        source: the hub id the messages are read under when it is not the session's own
        (a feed group's, for a leg); a new source rebuilds the session's books."""
        source = session_id if source is None else source
        with self._lock:
            old = self._feeds.get(session_id)
            if not topics or venue not in NORMALIZERS:
                self._feeds.pop(session_id, None)
            else:
                feed = old
                if feed is None or feed.venue != venue or feed.source != source:
                    feed = _Feed(venue, make_normalizer(venue), {}, source)
                    self._feeds[session_id] = feed
                feed.topics = {t: frozenset(e) for t, e in topics.items()}
            for key in [k for k in self._books if k[0] == session_id]:
                feed = self._feeds.get(session_id)
                if feed is None or feed is not old or key[1] not in feed.topics:
                    book = self._books.pop(key)
                    self._topic_books[key[:2]].remove(book)
                    if not self._topic_books[key[:2]]:
                        del self._topic_books[key[:2]]
                    self._retire(book)
            names: dict[str, list[tuple[int, str]]] = {}
            followers: dict[int, list[int]] = {}
            for sid, feed in self._feeds.items():
                followers.setdefault(feed.source, []).append(sid)
                for topic in feed.topics:
                    names.setdefault(ring_topic(feed.source, topic), []).append((sid, topic))
            self._names, self._followers = names, followers
            wanted = [*self._names, RING_GAP_TOPIC] if self._names else []
            if wanted and self._thread is None and self.available:
                self._start()
            if self._reader is not None:
                self._reader.set_topics(wanted)

    def snapshot_unreachable(self, venue: str, topics: Sequence[str]) -> str | None:
        """Why the books of these topics of a `venue` session could never get their REST
        snapshots (None: they can, or need none): books.snapshot_urls has no base for the
        venue. Nothing is fetched here: every session fetches over its own transport (a
        dpdk session's over its engine), which may not be up yet, and a venue that fails
        now is retried."""
        if venue not in REST_VENUES or not self.available:
            return None
        symbols = [s for s in (_rest_symbol(venue, t) for t in topics) if s]
        if symbols and self._snapshot_url(venue, symbols[0]) is None:
            return f"books.snapshot_urls has no {venue} base: its books would never sync"
        return None

    def forget_session(self, session_id: int) -> None:
        """The session is deleted: its books go, and its resync counts with them (a deleted
        session's labels would stay in /metrics for good otherwise)."""
        self.set_session(session_id, "", {})
        with self._lock:
            self._snapshot_policies.pop(session_id, None)
            for key in [k for k in self._retired if k[0] == session_id]:
                del self._retired[key]

    def set_snapshots(self, session_id: int, policy: SnapshotPolicy | None) -> None:
        """Publish the session's books periodically by this policy (None: by the default,
        `default_snapshots`, again); the first snapshots go out at once."""
        with self._lock:
            if policy is None:
                self._snapshot_policies.pop(session_id, None)
                return
            self._snapshot_policies[session_id] = policy
            for book in self._books.values():
                if book.session_id == session_id:
                    book.next_snapshot = 0.0
        reader = self._reader
        if reader is not None:
            with contextlib.suppress(RingError):
                reader.interrupt()  # an idle reader would wait READ_TIMEOUT first

    def snapshot_policy(self, session_id: int) -> SnapshotPolicy | None:
        """The session's own policy, None when it has none (default_snapshots applies)."""
        with self._lock:
            return self._snapshot_policies.get(session_id)

    def _retire(self, book: _Book) -> None:
        for reason, count in book.sync.resyncs.items():
            self._retired[(book.session_id, book.sync.venue, str(reason))] += count
        if book.gap_resets:
            self._retired[(book.session_id, book.sync.venue, UPSTREAM_GAP)] += book.gap_resets

    def _start(self) -> None:
        assert self.hub is not None
        ring = self.hub.ring
        self._reader = RingReader.attach_fd(
            ring.fd, topics=[*self._names, RING_GAP_TOPIC], copy=True, start="latest"
        )
        self._executor = ThreadPoolExecutor(2, thread_name_prefix="wsgw-books-rest")
        self._thread = threading.Thread(target=self._run, name="wsgw-books", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        reader, thread = self._reader, self._thread
        if reader is not None:
            reader.interrupt()
        if thread is not None:
            thread.join(timeout)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if reader is not None:
            reader.close()
        self._reader = self._thread = self._executor = None

    # ---- reading (any thread) -----------------------------------------------------------
    def view(
        self, session_id: int, symbol: str, depth: int | None = None, *, wait: bool = True
    ) -> BookView | None:
        """The book of `symbol` in the session (its venue's spelling; case is ignored when
        nothing matches exactly), None when the session keeps none. wait False: BooksBusy at
        once while the reader thread holds the books (an event loop must not wait for it)."""
        if not self._lock.acquire(blocking=wait):
            raise BooksBusy
        try:
            book = self._find(session_id, symbol)
            if book is None:
                return None
            sync = book.sync
            n_bids = len(sync.book.bids) if depth is None else depth
            n_asks = len(sync.book.asks) if depth is None else depth
            bids = sync.book.bids.levels(n_bids) if sync.synced else []
            asks = sync.book.asks.levels(n_asks) if sync.synced else []
            resyncs = {str(r): c for r, c in sync.resyncs.items()}
            if book.gap_resets:
                resyncs[UPSTREAM_GAP] = book.gap_resets
            return BookView(
                session_id,
                sync.venue,
                book.symbol,
                book.topic,
                sync.book.seq,
                sync.stale,
                list(bids),
                list(asks),
                book.updated_ns,
                resyncs,
                sync.last_reset,
            )
        finally:
            self._lock.release()

    def _find(self, session_id: int, symbol: str) -> _Book | None:
        books = [b for b in self._books.values() if b.session_id == session_id]
        for exact in (True, False):
            found = [
                b
                for b in books
                if (b.symbol == symbol if exact else b.symbol.lower() == symbol.lower())
            ]
            if found:  # a full book (it took deltas) before a partial-depth one
                return max(found, key=lambda b: (b.sync.book.seq != 0, b.updated_ns))
        return None

    def symbols(self, session_id: int) -> list[str]:
        with self._lock:
            return sorted({b.symbol for b in self._books.values() if b.session_id == session_id})

    def resync_counts(self) -> dict[tuple[int, str, str], int]:
        """(session, venue, reason) -> resyncs since the start, for /metrics."""
        with self._lock:
            totals = Counter(self._retired)
            for book in self._books.values():
                for reason, count in book.sync.resyncs.items():
                    totals[(book.session_id, book.sync.venue, str(reason))] += count
                if book.gap_resets:
                    totals[(book.session_id, book.sync.venue, UPSTREAM_GAP)] += book.gap_resets
            return dict(totals)

    def book_states(self) -> dict[tuple[int, str], int]:
        """(session, "synced" | "stale") -> books, for /metrics."""
        with self._lock:
            states: Counter[tuple[int, str]] = Counter()
            for book in self._books.values():
                states[(book.session_id, "stale" if book.sync.stale else "synced")] += 1
            return dict(states)

    # ---- the reader thread ----------------------------------------------------------------
    def _run(self) -> None:
        reader = self._reader
        assert reader is not None
        while not self._stop.is_set():
            try:
                records = reader.read_batch(timeout=READ_TIMEOUT)
            except RingClosedError:
                break
            except RingError as exc:
                log.error("books: reading the ring failed: %s", exc)
                break
            try:
                with self._lock:
                    out: list[_Out] = []
                    self._take_snapshots(out)
                    self._records(records, out)
                    self._due_resyncs()
                    self._due_snapshots(out)
                self._publish(out)
            except Exception:  # a bug must not stop the books for good
                log.exception("books: handling %d ring records failed", len(records))
            if reader.closed:
                break

    def _records(self, records: Sequence[Any], out: list[_Out]) -> None:
        """One ring read: runs of records of one C book go to C together, the rest one by
        one through Python, in ring order."""
        i, n = 0, len(records)
        while i < n:
            book = self._c_book_of(records[i])
            if book is None:
                self._record(records[i], out)
                i += 1
                continue
            name, j = records[i][2], i + 1
            while j < n and type(records[j]) is not Gap and records[j][2] == name:
                j += 1
            self._c_run(book, records[i:j], out)
            i = j

    def _c_book_of(self, record: Any) -> _Book | None:
        """The C book that takes this record's messages (None: the Python path): the
        record's topic feeds one book, of a venue done in C, that is synced."""
        if not self._c_path or type(record) is Gap:
            return None
        pairs = self._names.get(record[2], ())
        if len(pairs) != 1:
            return None  # a group's stream read by several legs, or a topic no one wants
        sid, topic = pairs[0]
        feed = self._feeds.get(sid)
        if feed is None or feed.venue not in C_VENUES:
            return None
        found = self._topic_books.get((sid, topic), ())
        if len(found) != 1 or not found[0].sync.synced:
            return None
        return found[0]

    def _c_run(self, book: _Book, records: Sequence[Any], out: list[_Out]) -> None:
        sid, topic = book.session_id, book.topic
        feed = self._feeds[sid]
        encodings = feed.topics.get(topic, frozenset())
        flags = (BOOK_OUT_JSON if "json" in encodings else 0) | (
            BOOK_OUT_BINARY if "binary" in encodings else 0
        )
        stamps = [r[3] for r in records]
        python_out: dict[int, list[_Out]] = {}

        def python_path(k: int) -> None:
            python_out[k] = []
            self._record_for(sid, topic, feed, records[k][4], stamps[k], python_out[k])

        results = book.sync.on_raw_batch([r[4] for r in records], stamps, flags, python_path)
        for k, result in enumerate(results):
            if result is None:
                out.extend(python_out.get(k, ()))
                continue
            outcome, as_json, as_binary = result
            book.updated_ns = stamps[k]
            if outcome.action is Action.APPLIED:
                self.c_applied += 1
                out.append((sid, topic, _Encoded(as_json, as_binary), stamps[k]))
            elif outcome.action is Action.RESYNC:
                self._stale(book, feed, outcome.reason, outcome.detail, stamps[k], out)

    def _record(self, record: Any, out: list[_Out]) -> None:
        if type(record) is Gap:  # this reader lost records: no session reconnects for it
            for sid in list(self._feeds):
                self._session_gap(sid, time.time_ns(), out, resync=True)
            return
        _, hub_id, name, ts, payload, _ = record
        if name == RING_GAP_TOPIC:
            for sid in self._followers.get(hub_id, ()):
                # a group's gap is a loss of every leg: none of them reconnects for it
                self._session_gap(sid, ts, out, resync=hub_id != sid)
            return
        for sid, topic in self._names.get(name, ()):
            feed = self._feeds.get(sid)
            if feed is not None:
                self._record_for(sid, topic, feed, payload, ts, out)

    def _record_for(
        self, sid: int, topic: str, feed: _Feed, payload: Any, ts: int, out: list[_Out]
    ) -> None:
        for event in feed.normalizer.normalize(payload, ts):
            if isinstance(event, BookSnapshot | BookDelta):
                self._book_event(sid, topic, feed, event, out)
            else:
                out.append((sid, topic, event, ts))

    def _book_event(
        self,
        sid: int,
        topic: str,
        feed: _Feed,
        event: BookSnapshot | BookDelta,
        out: list[_Out],
    ) -> None:
        key = (sid, topic, event.symbol)
        book = self._books.get(key)
        if book is None:
            options = sync_options(feed.venue, topic)
            if self._c_path and feed.venue in C_VENUES:
                options["key"] = "c"
            book = _Book(sid, topic, event.symbol, make_sync(feed.venue, event.symbol, **options))
            self._books[key] = book
            self._topic_books.setdefault((sid, topic), []).append(book)
        if isinstance(event, BookDelta) and event.prev_seq and feed.venue == "binance":
            book.futures = True
        outcome = book.sync.on_event(event)
        book.updated_ns = event.recv_ns
        if outcome.action is Action.APPLIED:
            out.append((sid, topic, event, event.recv_ns))
            if isinstance(event, BookSnapshot):
                book.failures = 0
        elif outcome.action is Action.RESYNC:
            self._stale(book, feed, outcome.reason, outcome.detail, event.recv_ns, out)
        elif outcome.action is Action.BUFFERED and not book.fetching and not book.resync_due:
            self._schedule(book, now=True)  # a REST book's first delta: get its snapshot
        elif (
            outcome.action is Action.IGNORED
            and book.sync.waiting_for_snapshot
            and not book.resync_due
            and feed.venue not in REST_VENUES
        ):
            # Updates come but the resubscribe's snapshot has not (yet): ask again unless
            # it comes meanwhile, with backoff, or the book would stay stale for good.
            book.failures += 1
            self._schedule(book)

    def _stale(
        self, book: _Book, feed: _Feed, reason: object, detail: str, ts: int, out: list[_Out]
    ) -> None:
        """The book was found wrong: its reset goes out, a new snapshot is asked for."""
        log.info(
            "books: session %d %s %s is stale (%s: %s): resynchronizing",
            book.session_id,
            feed.venue,
            book.symbol,
            reason,
            detail,
        )
        if book.sync.last_reset is not None:
            out.append((book.session_id, book.topic, book.sync.last_reset, ts))
        self._schedule(book)

    def _session_gap(self, sid: int, ts: int, out: list[_Out], *, resync: bool = False) -> None:
        """Messages of the session may be missing: its books cannot be trusted. resync: ask
        for a snapshot now (no reconnect of the session will bring one)."""
        for book in [b for b in self._books.values() if b.session_id == sid]:
            sync = book.sync
            if not sync.synced and not sync.buffers:
                continue  # already waiting for a snapshot
            reset = BookReset(sync.venue, book.symbol, UPSTREAM_GAP, ts)
            sync.synced = False
            sync.book.clear()
            sync.last_reset = reset
            book.gap_resets += 1
            out.append((sid, book.topic, reset, ts))
            if sync.buffers or resync:
                self._schedule(book, now=True)
            # the others: the session resubscribes as it reconnects, and the venue's
            # snapshot comes with it

    def _schedule(self, book: _Book, *, now: bool = False) -> None:
        delay = 0.0 if now else min(RESYNC_INTERVAL * (2**book.failures), RESYNC_BACKOFF_MAX)
        book.resync_due = time.monotonic() + delay

    def _due_resyncs(self) -> None:
        now = time.monotonic()
        for book in list(self._books.values()):
            if book.resync_due and book.resync_due <= now and not book.fetching:
                book.resync_due = 0.0
                if not book.sync.synced:  # a venue's snapshot may have come meanwhile
                    self._resync(book)

    def _due_snapshots(self, out: list[_Out]) -> None:
        """The periodic snapshots that are due, after the batch's deltas: each one holds
        every delta published before it and none after it."""
        default = self.default_snapshots
        if not self._snapshot_policies and default is None:
            return
        now = time.monotonic()
        for book in self._books.values():
            policy = self._snapshot_policies.get(book.session_id, default)
            if policy is None or book.next_snapshot > now:
                continue
            event = book.sync.snapshot_event(book.updated_ns, policy.depth)
            if event is None:
                continue  # stale: its resync publishes a snapshot, the next period another
            book.next_snapshot = now + policy.interval_s
            self.periodic_snapshots += 1
            out.append((book.session_id, book.topic, event, time.time_ns()))

    def _resync(self, book: _Book) -> None:
        venue = book.sync.venue
        if venue in REST_VENUES:
            url = self._snapshot_url(venue, book.symbol, futures=book.futures)
            if url is None or self._executor is None:
                return
            book.fetching = True
            self._executor.submit(self._fetch_snapshot, book, url)
        elif self.runtime is not None:
            # The venue sends a snapshot on subscribe; until then the sync ignores deltas.
            sid, feed = book.session_id, self._feeds.get(book.session_id)
            resync = getattr(self.runtime, "resync_group_topic", None)
            if feed is not None and feed.source != sid and resync is not None:
                # A group's leg: the group restarts the topic (that snapshot is of what it
                # delivered) or names its leg 0 (frames with no id pass from it only).
                sid = resync(sid, book.topic)
            self.runtime.unsubscribe(sid, [book.topic])
            self.runtime.subscribe(sid, [book.topic])

    def _snapshot_url(
        self, venue: str, symbol: str, *, futures: bool = False, limit: int | None = None
    ) -> str | None:
        urls = self.config.snapshot_urls
        base = (urls.get("binance_futures") or urls.get(venue)) if futures else urls.get(venue)
        if not base:
            log.error("books: no snapshot URL for %s (books.snapshot_urls)", venue)
            return None
        base = base.rstrip("/")
        if venue == "binance":
            query = urllib.parse.urlencode(
                {"symbol": symbol.upper(), "limit": limit or self.config.snapshot_limit}
            )
            return f"{base}/{'fapi/v1' if futures else 'api/v3'}/depth?{query}"
        return f"{base}/api/v2/order_book/{urllib.parse.quote(symbol.lower())}/"

    def _fetch_snapshot(self, book: _Book, url: str) -> None:
        """On the REST pool: the snapshot's bytes (None when the request failed), over the
        session's transport when the runtime has one for it (snapshot_fetcher)."""
        over = getattr(self.runtime, "snapshot_fetcher", None)
        fetch = (over(book.session_id) if over is not None else None) or self._fetch
        try:
            body: bytes | None = fetch(url, self.config.snapshot_timeout_s)
            error = ""
        except (OSError, ValueError, DataplaneError) as exc:  # the http module's: typed
            body, error = None, f"{url}: {type(exc).__name__}: {exc}"
        self._snapshots.put((book, body, time.time_ns(), error))
        reader = self._reader
        if reader is not None:
            with contextlib.suppress(RingError):
                reader.interrupt()

    def _take_snapshots(self, out: list[_Out]) -> None:
        while True:
            try:
                book, body, recv_ns, error = self._snapshots.get_nowait()
            except queue.Empty:
                return
            book.fetching = False
            venue = book.sync.venue
            if self._books.get((book.session_id, book.topic, book.symbol)) is not book:
                continue  # the book went meanwhile
            feed = self._feeds.get(book.session_id)
            rest = getattr(feed.normalizer, "rest_snapshot", None) if feed else None
            snap = None
            if body is not None and rest is not None:
                try:
                    snap = rest(body, book.symbol, recv_ns)
                except ValueError as exc:  # msgspec's errors are ValueErrors
                    error = f"the snapshot of {book.symbol} is not {venue}'s: {exc}"
            if snap is None:
                self.fetches[(venue, "failed")] += 1
                log.warning("books: snapshot of %s %s failed: %s", venue, book.symbol, error)
                book.failures += 1
                self._schedule(book)
                continue
            self.fetches[(venue, "ok")] += 1
            book.failures = 0
            outcome = book.sync.on_snapshot(snap)
            book.updated_ns = recv_ns
            if outcome.action is Action.APPLIED:
                event = book.sync.snapshot_event(recv_ns)
                if event is not None:
                    out.append((book.session_id, book.topic, event, recv_ns))
            elif outcome.action is Action.RESYNC:
                if book.sync.last_reset is not None:
                    out.append((book.session_id, book.topic, book.sync.last_reset, recv_ns))
                self._schedule(book)

    def _publish(self, out: list[_Out]) -> None:
        hub = self.hub
        if not out or hub is None:
            return
        batch = []
        with self._lock:
            feeds = {sid: self._feeds.get(sid) for sid in {o[0] for o in out}}
        for sid, topic, event, ts in out:
            feed = feeds.get(sid)
            for encoding in feed.topics.get(topic, ()) if feed else ():
                if isinstance(event, _Encoded):
                    payload = event.binary if encoding == "binary" else event.json
                else:
                    payload = encode(event, encoding)
                batch.append((sid, normalized_topic(topic, encoding), payload, ts, None))
        if batch:
            hub.publish_batch(batch)
            self.published += len(batch)


def _book_c_available() -> bool:
    """Whether the shim (and with it book.c) loads here."""
    from dataplane.shim import available

    return available("books: the C shim does not load; books take the Python path")


def sync_options(venue: str, topic: str) -> dict[str, Any]:
    """The BookSync options a topic implies: the levels a side the subscription shows (a
    level pushed out of them gets no delete: the book truncates to them itself). Bybit's
    `orderbook.N.SYMBOL`: N; Kraken's `book.N:SYMBOL`: N, `book:SYMBOL` 10 (its checksum is
    of the top 10 of the truncated book either way)."""
    if venue == "bybit":
        parts = topic.split(".")
        if len(parts) == 3 and parts[0] == "orderbook" and parts[1].isdigit():
            return {"depth": int(parts[1])}
    if venue == "kraken":
        depth = kraken_book_depth(topic)
        if depth is not None:
            return {"depth": depth}
    return {}


def _http_get(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "wsgw"})  # noqa: S310 (http(s) from settings)
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        body: bytes = response.read()
        return body


def _rest_symbol(venue: str, topic: str) -> str | None:
    """The symbol of a REST venue's book topic (Binance `btcusdt@depth@100ms`, Bitstamp
    `diff_order_book_btcusd`), None for its other topics."""
    if venue == "binance" and "@depth" in topic:
        return topic.split("@", 1)[0]
    if venue == "bitstamp" and "order_book_" in topic:
        return topic.rsplit("_", 1)[-1]
    return None
