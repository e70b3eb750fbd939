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
# Request header sets (all but the key) h11 validated already: see ClientHandshake.
_CHECKED_HEADERS: set[tuple[tuple[bytes, bytes], ...]] = set()
_CHECKED_HEADERS_MAX = 256


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


@dataclass(slots=True)
class Accepted:
    event: Handshake
    leftover: bytes  # bytes after the 101's header block: already WebSocket frames


class ClientHandshake:
    """Request out, response in; the key comes from os.urandom (section 4.1 item 7)."""

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
        if not host:
            raise LocalProtocolError("host must not be empty")
        if not path.startswith("/"):
            raise LocalProtocolError(f"path must start with '/', got {path!r}")
        for proto in subprotocols:
            if not _TOKEN.match(proto):
                raise LocalProtocolError(f"subprotocol {proto!r} is not an HTTP token")
        self.subprotocols = tuple(subprotocols)
        self.deflate = deflate
        ascii_host = host if host.isascii() else host.encode("idna").decode("ascii")
        self.key = base64.b64encode(os.urandom(16))
        headers: list[tuple[bytes, bytes]] = [
            (b"Host", host_header(ascii_host, port, secure).encode("ascii")),
            (b"Upgrade", b"websocket"),
            (b"Connection", b"Upgrade"),
            (b"Sec-WebSocket-Key", self.key),
            (b"Sec-WebSocket-Version", b"13"),
        ]
        if origin is not None:
            headers.append((b"Origin", origin.encode("latin-1")))
        if self.subprotocols:
            headers.append((b"Sec-WebSocket-Protocol", ", ".join(self.subprotocols).encode()))
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
        self._h11 = h11.Connection(h11.CLIENT)
        # h11 checks every header name and value against its grammar (a regex each, most
        # of the request's cost). The same headers come back on every open to a given URL
        # with the same options, only the key differs (base64: always a valid value), so
        # a set of headers h11 accepted once skips the check (`_parsed`); h11 still checks
        # the method, the target and the Host header count.
        checked = tuple(pair for pair in headers if pair[0] != b"Sec-WebSocket-Key")
        known = checked in _CHECKED_HEADERS
        try:
            self._request = self._h11.send(
                h11.Request(
                    method=b"GET",
                    target=path.encode("latin-1"),
                    headers=headers,
                    _parsed=known,
                )
            ) + (self._h11.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:
            raise LocalProtocolError(f"invalid handshake request: {exc}") from exc
        if not known and len(_CHECKED_HEADERS) < _CHECKED_HEADERS_MAX:
            _CHECKED_HEADERS.add(checked)
        self._response: h11.Response | None = None
        self._body = bytearray()

    def request(self) -> bytes:
        return self._request

    def receive_data(self, data: bytes) -> Accepted | RejectedHandshake | None:
        """Feed response bytes (b"" at end of stream); None until the outcome is known."""
        try:
            self._h11.receive_data(data)
        except RuntimeError:  # pragma: no cover - data after EOF: h11's own guard
            return self._reject("data after end of stream")
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                if self._response is not None:
                    return self._reject(f"server answered {self._response.status_code}")
                if not data:
                    return RejectedHandshake(0, "connection closed before the handshake finished")
                return RejectedHandshake(0, f"not an HTTP response: {exc}")
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    return self._accept(event)
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
                    return RejectedHandshake(0, "connection closed before the handshake finished")
                return self._reject()
            return None  # PAUSED: h11 waits for a switch that did not come

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

    def _accept(self, event: h11.InformationalResponse) -> Accepted | RejectedHandshake:
        frozen = tuple((bytes(k), bytes(v)) for k, v in event.headers)  # names lowercase
        # One pass over the headers collects what every check below needs.
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
        for key, value in frozen:
            found = wanted.get(key)
            if found is not None:
                found.append(value)

        def fail(reason: str) -> RejectedHandshake:
            return RejectedHandshake(101, reason, frozen)

        # Section 4.1, the client's checks of the server's handshake, items 2 to 6.
        if "websocket" not in _lower_tokens(upgrade):
            return fail("101 without 'Upgrade: websocket'")
        if "upgrade" not in _lower_tokens(connection):
            return fail("101 without 'Connection: Upgrade'")
        if len(accepts) != 1 or accepts[0].strip() != accept_token(self.key):
            return fail("Sec-WebSocket-Accept does not match our key")
        deflate: DeflateParams | None = None
        names: list[str] = []
        for name, params in parse_extensions(extensions):
            if name != EXTENSION_NAME or self.deflate is None:
                return fail(f"server chose extension {name!r} that we did not offer")
            if deflate is not None:
                return fail("server chose permessage-deflate twice")
            try:
                deflate = accept_response(self.deflate, params)
            except NegotiationError as exc:
                return fail(f"bad permessage-deflate response: {exc}")
            names.append(name)
        chosen = _split_commas(",".join(v.decode("latin-1") for v in protocols))
        if len(chosen) > 1 or (chosen and chosen[0] not in self.subprotocols):
            return fail(f"server chose subprotocol {', '.join(chosen)!r} that we did not offer")
        leftover, _closed = self._h11.trailing_data
        handshake = Handshake(chosen[0] if chosen else None, tuple(names), frozen, deflate)
        return Accepted(handshake, bytes(leftover))
