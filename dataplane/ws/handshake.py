"""The opening handshake, client side (RFC 6455 section 4.1), on h11.

`ClientHandshake` writes the upgrade request and reads the answer. A valid 101 yields the
`Handshake` event plus every byte that followed the response headers: frames the server
sent in the same segment as its 101 belong to the frame parser, not to HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import h11

from dataplane.ws.deflate import (
    EXTENSION_NAME,
    DeflateOptions,
    DeflateParams,
    NegotiationError,
    accept_response,
)
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.events import Handshake, RejectedHandshake

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # section 1.3
BODY_EXCERPT = 2048  # bytes of a rejection's body kept for the error
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 7230 section 3.2.6
_MANAGED = frozenset(
    {
        "host",
        "upgrade",
        "connection",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-protocol",
        "sec-websocket-extensions",
        "content-length",
        "transfer-encoding",
    }
)
HeaderPairs = Sequence[tuple[str | bytes, str | bytes]]
KEY_HEADER = b"Sec-WebSocket-Key"
ACCEPT_SIZE = 28  # base64 of a SHA-1 digest
# Upgrade requests h11 wrote, per set of handshake options (see `_RequestTemplate`).
_TEMPLATES: dict[tuple[object, ...], _RequestTemplate] = {}
_TEMPLATES_MAX = 256
# 101 heads h11 parsed, by their bytes with the Sec-WebSocket-Accept value blanked out
# (see `_KnownHead`): h11 refuses NUL anywhere in a head, so the blank can only stand
# where a token was taken out.
_HEADS: dict[bytes, _KnownHead] = {}
_HEADS_MAX = 256
_BLANK = b"\0" * ACCEPT_SIZE
# Where a head ends, found the way h11 finds it (h11._receivebuffer.blank_line_regex).
_END_OF_HEAD = re.compile(b"\n\r?\n", re.MULTILINE)


def accept_token(key: bytes) -> bytes:
    """Sec-WebSocket-Accept for a key: base64(SHA-1(key + GUID)) (section 4.2.2 item 5.4)."""
    return base64.b64encode(hashlib.sha1(key + GUID).digest())  # noqa: S324 - RFC-mandated


def host_header(host: str, port: int | None, secure: bool) -> str:
    """Host as section 4.1 item 4 wants it: the port only when it is not the default."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    default = 443 if secure else 80
    return name if port is None or port == default else f"{name}:{port}"


def _split_commas(value: str) -> list[str]:
    """Split a header list on commas outside quoted strings (RFC 7230 section 7)."""
    if '"' not in value:  # no quoted string (the usual case): every comma separates
        return [item for item in (part.strip() for part in value.split(",")) if item]
    items: list[str] = []
    current: list[str] = []
    quoted = False
    escaped = False
    for ch in value:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\" and quoted:
            current.append(ch)
            escaped = True
        elif ch == '"':
            quoted = not quoted
            current.append(ch)
        elif ch == "," and not quoted:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    items.append("".join(current).strip())
    return [item for item in items if item]


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def parse_extensions(values: Iterable[bytes]) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Sec-WebSocket-Extensions (section 9.1) as [(name, [(param, value or None)])]."""
    out: list[tuple[str, list[tuple[str, str | None]]]] = []
    for raw in values:
        for item in _split_commas(raw.decode("latin-1")):
            name, *params = (part.strip() for part in item.split(";"))
            parsed: list[tuple[str, str | None]] = []
            for param in params:
                if not param:
                    continue
                key, sep, val = param.partition("=")
                parsed.append((key.strip().lower(), _unquote(val.strip()) if sep else None))
            out.append((name.lower(), parsed))
    return out


def _lower_tokens(values: Iterable[bytes]) -> list[str]:
    return [token.lower() for value in values for token in _split_commas(value.decode("latin-1"))]


def _as_bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


def _shown(head: _Head, name: bytes) -> str:
    """A response header's values as received, for an error message: quoted and cut to a
    readable length, or "missing"."""
    values = [value for key, value in head.headers if key == name]
    if not values:
        return "missing"
    text = ", ".join(v.decode("latin-1") for v in values)
    return repr(text if len(text) <= 80 else text[:77] + "...")


@dataclass(slots=True)
class Accepted:
    event: Handshake
    leftover: bytes  # bytes after the 101's header block: already WebSocket frames


@dataclass(slots=True)
class _RequestTemplate:
    """The upgrade request h11 wrote for one set of options, cut around the key.

    Opens to one URL with the same options send the same request but for the key (fresh
    random base64: always a valid header value), so h11 writes and checks a set of options
    once and the next opens splice their key in. The headers are kept to bring an h11
    connection to the state its own request would have left it in (`ClientHandshake`).
    `answer` is the head the server last answered it with: the next open expects it."""

    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]  # as sent; the key's value is the first key
    before_key: bytes
    after_key: bytes
    answer: _KnownHead | None = None

    def request(self, key: bytes) -> bytes:
        return self.before_key + key + self.after_key

    def headers_with(self, key: bytes) -> list[tuple[bytes, bytes]]:
        return [(name, key if name == KEY_HEADER else value) for name, value in self.headers]


def _write_request(
    host: str,
    path: str,
    port: int | None,
    secure: bool,
    origin: str | None,
    subprotocols: tuple[str, ...],
    extra_headers: HeaderPairs,
    deflate: DeflateOptions | None,
    key: bytes,
) -> tuple[_RequestTemplate, h11.Connection]:
    """Check the options, have h11 write (and check) the request with `key`, and cut it
    into a template; the h11 connection is left waiting for the response."""
    if not host:
        raise LocalProtocolError("host must not be empty")
    if not path.startswith("/"):
        raise LocalProtocolError(f"path must start with '/', got {path!r}")
    for proto in subprotocols:
        if not _TOKEN.match(proto):
            raise LocalProtocolError(f"subprotocol {proto!r} is not an HTTP token")
    ascii_host = host if host.isascii() else host.encode("idna").decode("ascii")
    headers: list[tuple[bytes, bytes]] = [
        (b"Host", host_header(ascii_host, port, secure).encode("ascii")),
        (b"Upgrade", b"websocket"),
        (b"Connection", b"Upgrade"),
        (KEY_HEADER, key),
        (b"Sec-WebSocket-Version", b"13"),
    ]
    if origin is not None:
        headers.append((b"Origin", origin.encode("latin-1")))
    if subprotocols:
        headers.append((b"Sec-WebSocket-Protocol", ", ".join(subprotocols).encode()))
    if deflate is not None:
        headers.append((b"Sec-WebSocket-Extensions", deflate.offer().encode()))
    has_agent = False
    for name, value in extra_headers:
        lname = _as_bytes(name).lower().decode("latin-1")
        if lname in _MANAGED or (lname == "origin" and origin is not None):
            raise LocalProtocolError(f"header {lname!r} is set by the WebSocket handshake")
        has_agent = has_agent or lname == "user-agent"
        headers.append((_as_bytes(name), _as_bytes(value)))
    if not has_agent:
        headers.append((b"User-Agent", b"wsgw"))
    target = path.encode("latin-1")
    connection = h11.Connection(h11.CLIENT)
    try:
        request = connection.send(h11.Request(method=b"GET", target=target, headers=headers))
        end = connection.send(h11.EndOfMessage())
    except h11.LocalProtocolError as exc:
        raise LocalProtocolError(f"invalid handshake request: {exc}") from exc
    request = (request or b"") + (end or b"")
    # h11 writes each header as "name: value\r\n": the key's line is there exactly once.
    line = b"\r\n" + KEY_HEADER + b": " + key + b"\r\n"
    at = request.index(line) + len(line) - 2 - len(key)
    template = _RequestTemplate(target, tuple(headers), request[:at], request[at + len(key) :])
    return template, connection


@dataclass(frozen=True, slots=True)
class _Head:
    """A 101 response head as h11 parsed it, reduced to what the checks of section 4.1
    read (none of it depends on our offer or our key).

    See `_KnownHead` for how a head h11 parsed once stands for the next ones."""

    headers: tuple[tuple[bytes, bytes], ...]  # names in lower case
    accepts: tuple[bytes, ...]  # the Sec-WebSocket-Accept values
    accept_at: int  # the index of that header in headers, -1 without one
    upgrade: bool  # "websocket" among the Upgrade tokens
    connection: bool  # "upgrade" among the Connection tokens
    extensions: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...]
    subprotocols: tuple[str, ...]  # what the server chose (one, or none, is valid)

    @classmethod
    def parse(cls, headers: tuple[tuple[bytes, bytes], ...]) -> _Head:
        upgrade: list[bytes] = []
        connection: list[bytes] = []
        accepts: list[bytes] = []
        extensions: list[bytes] = []
        protocols: list[bytes] = []
        wanted = {
            b"upgrade": upgrade,
            b"connection": connection,
            b"sec-websocket-accept": accepts,
            b"sec-websocket-extensions": extensions,
            b"sec-websocket-protocol": protocols,
        }
        accept_at = -1
        for index, (key, value) in enumerate(headers):
            found = wanted.get(key)
            if found is not None:
                found.append(value)
                if found is accepts:
                    accept_at = index
        return cls(
            headers,
            tuple(accepts),
            accept_at,
            "websocket" in _lower_tokens(upgrade),
            "upgrade" in _lower_tokens(connection),
            tuple((name, tuple(params)) for name, params in parse_extensions(extensions)),
            tuple(_split_commas(",".join(v.decode("latin-1") for v in protocols))),
        )

    def with_accept(self, token: bytes) -> _Head:
        """This head with `token` as its (single) Sec-WebSocket-Accept value."""
        at = self.accept_at
        headers = (*self.headers[:at], (b"sec-websocket-accept", token), *self.headers[at + 1 :])
        return _Head(
            headers,
            (token,),
            at,
            self.upgrade,
            self.connection,
            self.extensions,
            self.subprotocols,
        )


@dataclass(frozen=True, slots=True)
class _KnownHead:
    """A 101 head h11 parsed, kept as its bytes with the accept token blanked out.

    The same server answers every open with the same head but for the Sec-WebSocket-Accept
    token. A head read later whose bytes, once our own expected token is blanked the same
    way, equal `blanked` IS this head with another base64 token at `at` (the blank is NUL,
    which h11 never lets into a head: it cannot stand anywhere else), so h11 would parse it
    into the same headers but for the accept value: `head.with_accept(token)`. Every other
    head (another server, a Date header, a split read, a 1xx first, a wrong token) goes
    through h11, which adds it here."""

    blanked: bytes
    at: int  # where the token stands in the head's bytes
    head: _Head  # h11's parse of the head it was kept from

    def with_token(self, token: bytes) -> bytes:
        """The head's bytes as the server sends them to the key whose token this is."""
        return self.blanked[: self.at] + token + self.blanked[self.at + ACCEPT_SIZE :]


class ClientHandshake:
    """Request out, response in; the key comes from os.urandom (section 4.1 item 7).

    h11 writes the request and parses the response; what it wrote or parsed once is reused
    when only the key (request) or its accept token (response) differs: `_RequestTemplate`,
    `_KnownHead`. The h11 connection is then only made for a response h11 has not seen.
    `expect()`, called while the request travels, checks in advance the head the server
    answered last time, with this key's token: the answer is then one byte comparison."""

    def __init__(
        self,
        host: str,
        path: str = "/",
        *,
        port: int | None = None,
        secure: bool = False,
        origin: str | None = None,
        subprotocols: Sequence[str] = (),
        extra_headers: HeaderPairs = (),
        deflate: DeflateOptions | None = None,
    ) -> None:
        self.subprotocols = tuple(subprotocols)
        self.deflate = deflate
        self.key = base64.b64encode(os.urandom(16))
        self._h11: h11.Connection | None = None
        # The options decide the request's bytes but for the key, and whether they are
        # valid at all: a template exists only for options h11 accepted.
        options = (
            host,
            path,
            port,
            secure,
            origin,
            self.subprotocols,
            tuple((name, value) for name, value in extra_headers) if extra_headers else (),
            deflate,
        )  # in _write_request's order: the key of the template and its arguments
        template = _TEMPLATES.get(options)
        if template is None:
            template, self._h11 = _write_request(*options, self.key)
            if len(_TEMPLATES) < _TEMPLATES_MAX:
                _TEMPLATES[options] = template
        self._template = template
        self._sent_key = self.key  # the key in the request's bytes
        self._request = template.request(self.key)
        self._token = b""  # the Sec-WebSocket-Accept we expect, once asked for
        # The head the server answered last time, with our token, and its outcome: expect()
        self._expected: tuple[bytes, Accepted | RejectedHandshake] | None = None
        self._fed = False  # response bytes went to h11 (or the head was known)
        self._interim = False  # a 1xx came before the answer
        self._response: h11.Response | None = None
        self._body = bytearray()

    def request(self) -> bytes:
        return self._request

    def expected_accept(self) -> bytes:
        token = self._token
        if not token:
            token = self._token = accept_token(self.key)
        return token

    def expect(self) -> None:
        """Work done ahead, while the request travels: the accept token, and the outcome
        of the head the server answered the last open with (`_RequestTemplate.answer`),
        which it most likely sends again with our token in it."""
        token = self.expected_accept()
        known = self._template.answer
        if known is not None and not self._fed:
            self._expected = (known.with_token(token), self._verdict(known.head.with_accept(token)))

    def _connection(self) -> h11.Connection:
        """h11, in the state our request left it in: h11 wrote that very request once
        (the template), and writes it again here for this key, unchecked (it was)."""
        connection = self._h11
        if connection is None:
            connection = h11.Connection(h11.CLIENT)
            template = self._template
            request = h11.Request(
                method=b"GET",
                target=template.target,
                headers=template.headers_with(self._sent_key),
                _parsed=True,
            )
            sent = (connection.send(request) or b"") + (connection.send(h11.EndOfMessage()) or b"")
            if sent != self._request:  # pragma: no cover - the template is h11's own output
                raise LocalProtocolError("the upgrade request differs from what h11 writes")
            self._h11 = connection
        return connection

    def receive_data(self, data: bytes) -> Accepted | RejectedHandshake | None:
        """Feed response bytes (b"" at end of stream); None until the outcome is known."""
        first = not self._fed
        self._fed = True
        if first and data:
            known = self._first_read_known(data)
            if known is not None:
                return known
        connection = self._connection()
        try:
            connection.receive_data(data)
        except RuntimeError:  # pragma: no cover - data after EOF: h11's own guard
            return self._reject("data after end of stream")
        return self._read_response(connection, data, first)

    def _first_read_known(self, data: bytes) -> Accepted | RejectedHandshake | None:
        """The outcome of a first read without h11, when it is a head seen before: the one
        this template expects (`_expected`), or one remembered for any key
        (`_known_head`); None: h11 parses it."""
        expected = self._expected
        if expected is not None and data.startswith(expected[0]):
            outcome = expected[1]
            if isinstance(outcome, Accepted):
                return Accepted(outcome.event, data[len(expected[0]) :])
            return outcome
        return self._known_head(data)

    def _read_response(  # noqa: PLR0911  h11's event loop: one return per outcome, in one place
        self, connection: h11.Connection, data: bytes, first: bool
    ) -> Accepted | RejectedHandshake | None:
        """h11's events up to the outcome (RFC 6455 section 4.1: the client validates the
        server's response): a 101 goes to `_verdict`, other 1xx are skipped, any other
        status is a rejection with an excerpt of its body."""
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                if self._response is not None:
                    return self._reject(f"server answered {self._response.status_code}")
                if not data:
                    return RejectedHandshake(
                        0, "connection closed before the handshake finished", closed=True
                    )
                return RejectedHandshake(0, f"not an HTTP response: {exc}")
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    return self._accept(event, data if first else b"")
                self._interim = True
                continue  # 100 Continue and friends: the real answer follows
            if isinstance(event, h11.Response):
                self._response = event
                continue
            if isinstance(event, h11.Data):
                room = BODY_EXCERPT - len(self._body)
                self._body += event.data[:room]
                if len(self._body) >= BODY_EXCERPT:
                    return self._reject()
                continue
            if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                if self._response is None:  # pragma: no cover - h11 orders events
                    return RejectedHandshake(
                        0, "connection closed before the handshake finished", closed=True
                    )
                return self._reject()
            return None  # PAUSED: h11 waits for a switch that did not come

    def _known_head(self, data: bytes) -> Accepted | RejectedHandshake | None:
        """The outcome for a first read whose head h11 parsed before (`_KnownHead`), or
        None. The head's end is found as h11 finds it (the first empty line)."""
        end = _END_OF_HEAD.search(data)
        if end is None:
            return None
        size = end.end()
        token = self.expected_accept()
        at = data.find(token, 0, size)
        if at < 0:
            return None
        known = _HEADS.get(data[:at] + _BLANK + data[at + ACCEPT_SIZE : size])
        if known is None:
            return None
        self._template.answer = known
        return self._verdict(known.head.with_accept(token), data[size:])

    def _remember(self, data: bytes, leftover: bytes, head: _Head) -> None:
        """Keep a 101 head h11 parsed from one read (nothing before it) for the next
        opens (`_KnownHead`): its token must be ours, and appear once."""
        token = self.expected_accept()
        if self._interim or head.accepts != (token,):
            return
        raw = data[: len(data) - len(leftover)]
        at = raw.find(token)
        if at < 0 or raw.find(token, at + 1) >= 0:
            return  # not once: which one to blank would be a guess
        blanked = raw[:at] + _BLANK + raw[at + ACCEPT_SIZE :]
        known = _HEADS.get(blanked)
        if known is None:
            known = _KnownHead(blanked, at, head)
            if len(_HEADS) < _HEADS_MAX:
                _HEADS[blanked] = known
        self._template.answer = known

    def _reject(self, reason: str | None = None) -> RejectedHandshake:
        response = self._response
        status = response.status_code if response is not None else 0
        headers = tuple((bytes(k), bytes(v)) for k, v in response.headers) if response else ()
        return RejectedHandshake(
            status,
            reason or f"server answered {status} instead of 101 Switching Protocols",
            headers,
            bytes(self._body),
        )

    def _accept(
        self, event: h11.InformationalResponse, data: bytes
    ) -> Accepted | RejectedHandshake:
        """h11's 101; data: the read it came whole in, when it was the first one."""
        assert self._h11 is not None
        head = _Head.parse(tuple((bytes(k), bytes(v)) for k, v in event.headers))
        leftover = bytes(self._h11.trailing_data[0])
        if data:
            self._remember(data, leftover, head)
        return self._verdict(head, leftover)

    def _verdict(  # noqa: PLR0911  section 4.1's checklist: one return per item, in its order
        self, head: _Head, leftover: bytes = b""
    ) -> Accepted | RejectedHandshake:
        """Section 4.1, the client's checks of the server's handshake, items 2 to 6."""
        frozen = head.headers

        def fail(reason: str) -> RejectedHandshake:
            return RejectedHandshake(101, reason, frozen)

        if not head.upgrade:
            return fail(f"101 without 'Upgrade: websocket' (Upgrade: {_shown(head, b'upgrade')})")
        if not head.connection:
            return fail(
                f"101 without 'Connection: Upgrade' (Connection: {_shown(head, b'connection')})"
            )
        accepts = head.accepts
        expected = self.expected_accept()
        if len(accepts) != 1 or accepts[0].strip() != expected:
            return fail(
                f"Sec-WebSocket-Accept does not match our key: expected "
                f"{expected.decode()!r}, received {_shown(head, b'sec-websocket-accept')}"
            )
        deflate: DeflateParams | None = None
        names: list[str] = []
        for name, params in head.extensions:
            if name != EXTENSION_NAME or self.deflate is None:
                offered = "permessage-deflate" if self.deflate is not None else "none"
                return fail(
                    f"server chose extension {name!r} that we did not offer (offered: {offered})"
                )
            if deflate is not None:
                return fail("server chose permessage-deflate twice")
            try:
                deflate = accept_response(self.deflate, list(params))
            except NegotiationError as exc:
                return fail(f"bad permessage-deflate response: {exc}")
            names.append(name)
        chosen = head.subprotocols
        if len(chosen) > 1 or (chosen and chosen[0] not in self.subprotocols):
            offered = ", ".join(self.subprotocols) or "none"
            return fail(
                f"server chose subprotocol {', '.join(chosen)!r} that we did not offer "
                f"(offered: {offered})"
            )
        handshake = Handshake(chosen[0] if chosen else None, tuple(names), frozen, deflate)
        return Accepted(handshake, leftover)
