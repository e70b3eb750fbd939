"""Core NATS read in the caller's thread: a sans-IO parser of what a NATS server sends
(https://docs.nats.io/reference/reference-protocols/nats-protocol) and a subscriber
connection that reads its socket where the consumer waits.

Why not nats-py for this: it is asyncio only, so a sync consumer needs its loop in a thread
and a hand-off per batch (two wake-ups where the socket needs one), and its per-message
pipeline (a parser step, a Msg object, a queue, a task step) costs ~15 us of CPU: a consumer
of at most ~67k msg/s on the lab machine (issue #16). Here a message costs its parse, and
the plain messages of a read are found by one shim call (`NatsParser`). What needs a
library stays on nats-py (gateway.client.nats): JetStream, TLS.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import unquote, urlsplit

import orjson

from gateway.client.socketwait import SocketWait

if TYPE_CHECKING:
    from dataplane.shim import NatsScanner

#: Longest control line (`MSG ...`, `INFO {...}`) the parser holds before it gives up: the
#: server's own default max_control_line is 4 KiB; INFO may be longer (cluster URLs).
MAX_CONTROL_LINE = 64 << 10
#: Largest payload the parser accepts (the server's max_payload is at most 64 MiB).
MAX_PAYLOAD = 64 << 20
RECV_BYTES = 256 << 10
#: Messages read from the socket and not yet taken by the consumer, at the most: beyond it
#: the socket is left unread, TCP pushes back and the server's slow-consumer rule applies
#: (as nats-py's default pending limit of 65536 messages did for a subscription).
MAX_HELD = 65536
#: Subjects a parser keeps decoded, and a source parsed (a bus has few; a flood of new ones
#: just starts over).
MAX_SUBJECTS_KEPT = 4096
#: Between reconnect attempts to the whole server list (nats-py waits 2 s; the sink's
#: messages meanwhile are lost either way: core NATS keeps nothing).
RECONNECT_WAIT_S = 0.25
#: How long one reconnect attempt may take per server: it runs in the read or wait that
#: finds it due, so a server that does not answer holds that call at most this long.
RECONNECT_TIMEOUT_S = 1.0
#: With nothing received for this long the subscriber PINGs; a server that has not answered
#: MAX_OUTSTANDING_PINGS of them is taken for dead and the connection made again.
PING_INTERVAL_S = 20.0
MAX_OUTSTANDING_PINGS = 2


class NatsProtocolError(Exception):
    """The server sent what the protocol does not allow (the connection is made again)."""


class NatsServerError(Exception):
    """The server refused: its -ERR text (e.g. 'Authorization Violation')."""


class NatsNeedsLibraryError(Exception):
    """The server asks for what this reader does not do (TLS): use nats-py."""


class NatsMsg(NamedTuple):
    subject: str
    sid: int
    reply: str | None
    header_block: bytes | None  # HMSG: `NATS/1.0...\r\n\r\n` as sent, parsed on demand
    payload: bytes
    #: The values of the parser's `numbers` headers (header_number), in their order.
    numbers: tuple[int, ...] = ()

    @property
    def headers(self) -> dict[str, str] | None:
        return None if self.header_block is None else parse_headers(self.header_block)


class NatsInfo(NamedTuple):
    fields: dict[str, object]


class NatsErr(NamedTuple):
    text: str


class NatsPing(NamedTuple):
    pass


class NatsPong(NamedTuple):
    pass


class NatsOk(NamedTuple):
    pass


class NatsReconnected(NamedTuple):
    """In a subscriber's messages: the connection was made again before the next one, and
    what the server published meanwhile was not delivered (core NATS keeps nothing)."""


NatsEvent = NatsMsg | NatsInfo | NatsErr | NatsPing | NatsPong | NatsOk
_PING, _PONG, _OK, _RECONNECTED = NatsPing(), NatsPong(), NatsOk(), NatsReconnected()


def header_value(block: bytes, name: bytes) -> bytes | None:
    """One header's value straight from the block, without parsing the rest (a message's
    hot path reads two); the name as the sender spelled it, its first line."""
    at = block.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    start = at + len(name) + 3
    return block[start : block.find(b"\r\n", start)].strip()


def header_number(block: bytes | None, name: bytes) -> int:
    """A header's value as a number: 0 without headers, without the header, or with a value
    that is not one (the sink's Wsgw-Seq and Wsgw-Recv-Ts)."""
    return number_or_zero(None if block is None else header_value(block, name))


def number_or_zero(value: bytes | str | None) -> int:
    """A header value as a number; 0 when there is none or it is not one (how both NATS
    readers, this one and nats-py's path, count a Wsgw-Seq or Wsgw-Recv-Ts)."""
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        return 0


def parse_headers(block: bytes) -> dict[str, str]:
    """A message's header block: `NATS/1.0[ status[ description]]\\r\\n(Name: value\\r\\n)*
    \\r\\n` (ADR-4). A status line's code and text come as 'Status' and 'Description', as
    nats-py gives them; a name given twice keeps its first value."""
    text = block.decode("utf-8", "replace")
    lines = text.split("\r\n")
    version, _, status = lines[0].partition(" ")
    if not version.startswith("NATS/"):
        raise NatsProtocolError(f"header block starts with {lines[0][:32]!r}, not NATS/1.0")
    headers: dict[str, str] = {}
    status = status.strip()
    if status:
        code, _, description = status.partition(" ")
        headers["Status"] = code
        if description.strip():
            headers["Description"] = description.strip()
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise NatsProtocolError(f"header line {line[:32]!r} has no name")
        headers.setdefault(name.strip(), value.strip())
    return headers


class NatsParser:
    """Bytes from the server in, events out; a message split across reads waits for its
    end. Operation names are case-insensitive (the protocol says so).

    The plain messages of a read (MSG and HMSG without a reply subject, whole) are found by
    one shim call when the shim loads (`dataplane.shim.NatsScanner`, ~4x less CPU a message);
    everything else, and everything without the shim, is read here, with the same events and
    errors either way (tests/unit/client/test_nats_parser.py). scan=False: Python only.
    numbers: header names (at most two) whose values each message carries as numbers
    (`NatsMsg.numbers`, `header_number`): read while scanning, not per message in Python."""

    def __init__(self, scan: bool = True, numbers: tuple[bytes, ...] = ()) -> None:
        if len(numbers) > 2:
            raise ValueError(f"at most two header numbers, not {len(numbers)}")
        self._buf = bytearray()
        self.numbers = numbers
        self._scanner = _scanner(numbers) if scan else None
        self._subjects: dict[bytes, str] = {}  # the scan's subjects, decoded once

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[NatsEvent]:
        buf = self._buf
        buf += data
        events: list[NatsEvent] = []
        pos = 0
        size = len(buf)
        while pos < size:
            if self._scanner is not None:
                pos = self._scanned(buf, pos, events)
                if pos >= size:
                    break
            after = self._parse_one(buf, pos, events)
            if after is None:
                break
            pos = after
        del buf[:pos]
        return events

    def _parse_one(self, buf: bytearray, pos: int, events: list[NatsEvent]) -> int | None:
        """The event at pos, added to events: where the next one starts; None while it is
        not all here."""
        size = len(buf)
        first = buf[pos]
        line = None
        if first in _M:
            line = _MSG_LINE.match(buf, pos)
        elif first in _H:
            line = _HMSG_LINE.match(buf, pos)
        if line is None:  # a control line, an incomplete one, or a malformed one
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if size - pos > MAX_CONTROL_LINE:
                    raise NatsProtocolError(f"a control line longer than {MAX_CONTROL_LINE}")
                return None
            events.append(_control(bytes(buf[pos:eol])))
            return eol + 2
        start = line.end()
        end = start + _size(line.group("total"))
        if end + 2 > size:  # its payload is still on the way
            return None
        if buf[end : end + 2] != b"\r\n":
            raise NatsProtocolError("a message's payload not followed by CRLF")
        hlen = line.group("hlen") if first in _H else None
        block = None
        if hlen is not None:
            header_end = start + _size(hlen)
            if header_end > end:
                raise NatsProtocolError("HMSG headers longer than the message")
            block = bytes(buf[start:header_end])
            if not block.startswith(b"NATS/"):
                raise NatsProtocolError(f"header block starts with {block[:16]!r}")
            start = header_end
        reply = line.group("reply")
        events.append(
            NatsMsg(
                _subject(line.group("subject")),
                int(line.group("sid")),
                None if reply is None else _subject(reply),
                block,
                bytes(buf[start:end]),
                tuple(header_number(block, name) for name in self.numbers),
            )
        )
        return end + 2

    def _scanned(self, buf: bytearray, pos: int, events: list[NatsEvent]) -> int:
        """The plain messages from pos on, as the shim found them; where it stopped."""
        scanner = self._scanner
        assert scanner is not None
        width, ask = scanner.WORDS, scanner.ASK
        subjects, names, count = self._subjects, self.numbers, len(self.numbers)
        while True:
            words, stop = scanner.scan(buf, pos)
            for at in range(0, len(words), width):
                s_off, s_len, sid, h_off, h_len, p_off, p_len, a, b = words[at : at + width]
                token = bytes(buf[s_off : s_off + s_len])
                subject = subjects.get(token)
                if subject is None:
                    subject = _subject(token)
                    if len(subjects) >= MAX_SUBJECTS_KEPT:
                        subjects.clear()
                    subjects[token] = subject
                block = bytes(buf[h_off : h_off + h_len]) if h_len else None
                if ask in (a, b):  # a value the scan left to header_number
                    a, b = (*(header_number(block, name) for name in names), 0, 0)[:2]
                events.append(
                    NatsMsg(
                        subject, sid, None, block, bytes(buf[p_off : p_off + p_len]), (a, b)[:count]
                    )
                )
            if stop == pos or len(words) < width * scanner.max_msgs:
                return stop
            pos = stop


# A message's control line (the protocol's operation names are case-insensitive). With a
# reply subject optional before the counts, the regex tries it first and backs off, as the
# server's own arity rules read (nats-py's parser does the same).
_M = frozenset(b"Mm")
_H = frozenset(b"Hh")
_ARG = rb"[ \t]+"
_MSG_LINE = re.compile(
    rb"(?i:MSG)" + _ARG + rb"(?P<subject>[^ \t\r\n]+)" + _ARG + rb"(?P<sid>[0-9]+)"
    rb"(?:" + _ARG + rb"(?P<reply>[^ \t\r\n]+))?" + _ARG + rb"(?P<total>[0-9]+)\r\n"
)
_HMSG_LINE = re.compile(
    rb"(?i:HMSG)" + _ARG + rb"(?P<subject>[^ \t\r\n]+)" + _ARG + rb"(?P<sid>[0-9]+)"
    rb"(?:"
    + _ARG
    + rb"(?P<reply>[^ \t\r\n]+))?"
    + _ARG
    + rb"(?P<hlen>[0-9]+)"
    + _ARG
    + rb"(?P<total>[0-9]+)\r\n"
)


def _scanner(numbers: tuple[bytes, ...]) -> NatsScanner | None:
    """A shim scanner for a parser, None without the shim (WSGW_NATS_SCAN=python: never)."""
    from dataplane.shim import NatsScanner, available

    if os.environ.get("WSGW_NATS_SCAN", "").lower() == "python" or not available(
        "NATS scan falls back to pure Python"
    ):
        return None

    return NatsScanner(MAX_PAYLOAD, numbers)


def _subject(token: bytes) -> str:
    try:
        return token.decode()
    except UnicodeDecodeError:
        raise NatsProtocolError(f"a subject that is not UTF-8: {token[:40]!r}") from None


def _size(token: bytes) -> int:
    value = int(token)
    if value > MAX_PAYLOAD:
        raise NatsProtocolError(f"{value} is over the largest payload ({MAX_PAYLOAD})")
    return value


def _control(line: bytes) -> NatsEvent:
    op, _, rest = line.partition(b" ")
    op = op.upper()
    if op in (b"MSG", b"HMSG"):
        raise NatsProtocolError(f"a malformed {op.decode()} line: {line[:64]!r}")
    if op == b"PING" and not rest.strip():
        return _PING
    if op == b"PONG" and not rest.strip():
        return _PONG
    if op == b"+OK" and not rest.strip():
        return _OK
    if op == b"-ERR":
        return NatsErr(rest.decode("utf-8", "replace").strip().strip("'"))
    if op == b"INFO":
        try:
            fields = orjson.loads(rest)
        except orjson.JSONDecodeError as exc:
            raise NatsProtocolError(f"INFO is not JSON: {exc}") from exc
        if not isinstance(fields, dict):
            raise NatsProtocolError("INFO is not a JSON object")
        return NatsInfo(fields)
    raise NatsProtocolError(f"unknown operation {line[:24]!r}")


class _Server(NamedTuple):
    host: str
    port: int
    user: str | None
    password: str | None


def _server(url: str) -> _Server:
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    if parts.scheme != "nats":
        raise NatsNeedsLibraryError(f"{url}: {parts.scheme}:// (this reader speaks nats://)")
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return _Server(parts.hostname or "127.0.0.1", parts.port or 4222, user, password)


class CoreNatsSubscriber:
    """Core NATS subscriptions (one per subject), read in the thread that calls `read` or
    `wait`.

    Connecting sends CONNECT, the SUBs and a PING and waits for the PONG, so they are
    in place when the constructor returns (a refusal raises NatsServerError). A connection
    that drops (or a server that stops answering PINGs) is made again on the next read or
    wait, server after server, every RECONNECT_WAIT_S; what was published meanwhile is lost
    (core NATS). The server's PINGs are answered when the consumer reads: one that does not
    read for minutes is dropped by the server and reconnects when it reads again.
    `wait` may run in another thread than `read` (never both at once); `interrupt` and
    `close` may come from any thread."""

    def __init__(
        self,
        servers: list[str],
        subjects: list[str],
        *,
        token: str | None = None,
        name: str | None = None,
        connect_timeout: float = 5.0,
        numbers: tuple[bytes, ...] = (),
    ) -> None:
        self.servers = [_server(url) for url in servers]
        self.numbers = numbers  # NatsParser(numbers=): header values as numbers
        if not subjects:
            raise ValueError("no subject to subscribe to")
        self.subjects = subjects
        self.received = 0  # messages the server sent (what the subjects matched)
        self.token = token
        self.name = name
        self.connect_timeout = connect_timeout
        self.connects = 0
        self.disconnects = 0
        self.last_error: str | None = None
        self._sock: socket.socket | None = None
        self._parser = NatsParser(numbers=numbers)
        self._pending: deque[NatsMsg | NatsReconnected] = deque()
        self._resumed = False  # made again: a NatsReconnected goes before the next message
        self._lock = threading.Lock()
        self._waiting = SocketWait()
        self._next_server = 0
        self._retry_at = 0.0
        self._last_rx = 0.0
        self._pings_out = 0
        try:
            self._connect_any(self.connect_timeout, raise_last=True)
        except BaseException:
            self.close()
            raise

    # ---- connection -----------------------------------------------------------------------
    def _connect_any(self, timeout: float, raise_last: bool = False) -> bool:
        error: Exception | None = None
        for _ in range(len(self.servers)):
            server = self.servers[self._next_server]
            self._next_server = (self._next_server + 1) % len(self.servers)
            try:
                self._connect(server, timeout)
                return True
            except (OSError, NatsProtocolError, NatsServerError, TimeoutError) as exc:
                error = exc
                self.last_error = f"{server.host}:{server.port}: {type(exc).__name__}: {exc}"
        self._retry_at = time.monotonic() + RECONNECT_WAIT_S
        if raise_last and error is not None:
            raise error
        return False

    def _connect(self, server: _Server, timeout: float) -> None:
        sock = socket.create_connection((server.host, server.port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            parser = NatsParser(numbers=self.numbers)
            deadline = time.monotonic() + timeout
            info = self._expect(sock, parser, deadline, NatsInfo)
            assert isinstance(info, NatsInfo)
            if info.fields.get("tls_required"):
                raise NatsNeedsLibraryError("the server requires TLS")
            connect: dict[str, object] = {
                "verbose": False,
                "pedantic": False,
                "headers": True,
                "no_responders": False,
                "protocol": 1,
                "lang": "python-wsgw",
                "version": "1",
            }
            if self.name:
                connect["name"] = self.name
            if self.token:
                connect["auth_token"] = self.token
            if server.user is not None:
                connect["user"] = server.user
                connect["pass"] = server.password or ""
            subs = b"".join(
                b"SUB %s %d\r\n" % (subject.encode(), sid)
                for sid, subject in enumerate(self.subjects, 1)
            )
            sock.sendall(b"CONNECT " + orjson.dumps(connect) + b"\r\n" + subs + b"PING\r\n")
            early: list[NatsMsg] = []
            self._expect(sock, parser, deadline, NatsPong, early)
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        with self._lock:
            self._sock = sock
            self._parser = parser
            self._resumed = self.connects > 0
            for msg in early:
                self._queue(msg)
            self._last_rx = time.monotonic()
            self._pings_out = 0
        self.connects += 1

    @staticmethod
    def _expect(
        sock: socket.socket,
        parser: NatsParser,
        deadline: float,
        kind: type[NatsInfo] | type[NatsPong],
        early: list[NatsMsg] | None = None,
    ) -> NatsEvent:
        """Read until an event of `kind` (messages before it go to `early`); -ERR raises."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind.__name__[4:].upper()} from the server in time")
            sock.settimeout(left)
            data = sock.recv(RECV_BYTES)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            for event in parser.feed(data):
                if isinstance(event, kind):
                    return event
                if isinstance(event, NatsErr):
                    raise NatsServerError(event.text)
                if isinstance(event, NatsPing):
                    sock.sendall(b"PONG\r\n")
                elif isinstance(event, NatsMsg) and early is not None:
                    early.append(event)

    def _drop(self, why: str) -> None:
        """The connection is gone (lock held): the next read or wait makes it again."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
            self.disconnects += 1
            self.last_error = why
            self._retry_at = 0.0

    def _reconnect_due(self) -> None:
        """Called without the lock: connect again when the wait between attempts is over."""
        if self._sock is None and not self._waiting.closed and time.monotonic() >= self._retry_at:
            with contextlib.suppress(NatsNeedsLibraryError):
                self._connect_any(min(self.connect_timeout, RECONNECT_TIMEOUT_S))

    # ---- reading --------------------------------------------------------------------------
    def _queue(self, msg: NatsMsg) -> None:
        """A message for the consumer (lock held), after the mark of a reconnect before it."""
        if self._resumed:
            self._resumed = False
            self._pending.append(_RECONNECTED)
        self._pending.append(msg)
        self.received += 1

    def _take(self, data: bytes) -> None:
        """What the socket gave (lock held): messages queued, PINGs answered."""
        assert self._sock is not None
        self._last_rx = time.monotonic()
        self._pings_out = 0
        for event in self._parser.feed(data):
            if type(event) is NatsMsg:
                self._queue(event)
            elif type(event) is NatsPing:
                self._sock.sendall(b"PONG\r\n")
            elif type(event) is NatsErr:
                # Errors after CONNECT end the connection on the server's side ('Slow
                # Consumer', 'Stale Connection'); the few that do not are not sent to a
                # non-verbose, non-pedantic subscriber.
                self.last_error = event.text

    def _drain_socket(self) -> bool:
        """Read what the socket holds without blocking (lock held); False: connection gone."""
        sock = self._sock
        if sock is None:
            return False
        try:
            while True:
                data = sock.recv(RECV_BYTES)
                if not data:
                    self._drop("the server closed the connection")
                    return False
                self._take(data)
                if len(data) < RECV_BYTES or len(self._pending) >= MAX_HELD:
                    return True
        except (BlockingIOError, InterruptedError):
            return True
        except (OSError, NatsProtocolError) as exc:
            self._drop(f"{type(exc).__name__}: {exc}")
            return False

    def _keepalive(self) -> None:
        """PING a server that has been quiet (lock held); drop it when PINGs go unanswered."""
        if self._sock is None or time.monotonic() - self._last_rx < PING_INTERVAL_S:
            return
        if self._pings_out >= MAX_OUTSTANDING_PINGS:
            self._drop("the server stopped answering PINGs")
            return
        try:
            self._sock.sendall(b"PING\r\n")
        except OSError as exc:
            self._drop(f"{type(exc).__name__}: {exc}")
            return
        self._pings_out += 1
        self._last_rx = time.monotonic()  # the next PING one interval from now

    def read(
        self, max_messages: int = 1024, timeout: float | None = 0.0, spin: float = 0.0
    ) -> list[NatsMsg | NatsReconnected]:
        """Up to max_messages; waits up to timeout (None: until one comes or close), polling
        the socket for `spin` s of it before sleeping. A NatsReconnected comes before the
        first message of a connection made again, in the same read."""
        self._reconnect_due()
        if not self._pending and timeout != 0:
            self.wait(timeout, spin)
        with self._lock:
            if not self._waiting.closed and len(self._pending) < max_messages:
                self._drain_socket()
            pending = self._pending
            count = min(max_messages, len(pending))
            if count < len(pending) and pending[count - 1] is _RECONNECTED:
                count += 1  # the mark comes with its message: it is not one
            return [pending.popleft() for _ in range(count)]

    def wait(self, timeout: float | None, spin: float = 0.0) -> bool:
        """Until a message is queued (True), timeout, close or interrupt (False); the
        socket is polled for `spin` s (inf: all the time) before each sleep."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._waiting.closed:
            self._reconnect_due()
            with self._lock:
                if self._pending:
                    return True
                self._keepalive()
                sock = self._sock
            left = PING_INTERVAL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            if sock is None:  # between reconnect attempts
                step = max(0.0, min(left, self._retry_at - time.monotonic()))
            else:
                step = min(left, PING_INTERVAL_S)
            woke = self._waiting.wait(None if sock is None else sock.fileno(), step, spin)
            if woke == "interrupted":
                return False
            if woke == "ready":
                with self._lock:
                    if self._sock is sock:
                        self._drain_socket()
        return False

    def interrupt(self) -> None:
        self._waiting.interrupt()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def closed(self) -> bool:
        return self._waiting.closed

    def close(self) -> None:
        """Close the connection; a wait blocked in another thread returns False first."""
        self._waiting.close()
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.close()
                self._sock = None
