"""One HTTP/1.1 GET over either transport: the REST book snapshots of a session's venue
(Binance, Bitstamp; issue #21) fetched over the same network as the session's WebSocket.

A gateway whose venue is reachable only through a DPDK port (the lab: the peer lives in a
namespace only the DPDK session reaches) cannot fetch a snapshot with the kernel's urllib.
So the request goes out where the session's bytes go: TCP through the engine's stack
(`dpdk.open_tcp`, the connect the WebSocket uses), TLS for https:// (the sans-IO
`TlsClient` wss:// uses), the request and the response through h11 (RFC 9112: a
Content-Length or chunked body, or one that ends with the connection), then closed.

    response = await http_get(url, engine=engine, timeout=5.0)   # engine None: the kernel
    body = get_threadsafe(loop, url, 5.0, engine=engine)         # from another thread

Every failure is typed and worth another try (the book manager retries with backoff):
the `TransportError` family for the connection (RefusedError: nothing listens,
ResetError, TransportTimeoutError: no whole answer in time), the `TlsError` family,
`HttpStatusError` (not 200), `TruncatedResponseError` (the connection ended before the
response did), `HttpProtocolError` (not HTTP/1.1, or a body past max_body).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import h11

from dataplane.errors import DataplaneError, TransportError, TransportTimeoutError, transport_error
from dataplane.transports.dpdk import open_tcp
from dataplane.ws.errors import LocalProtocolError, TlsError
from dataplane.ws.tls import TlsClient

if TYPE_CHECKING:
    from dataplane.engine import Engine

#: The largest body taken (a Binance depth-5000 snapshot is about 300 kB).
MAX_BODY = 16 << 20
#: After the answer: how long a graceful close may take before the connection is aborted.
CLOSE_LINGER_S = 2.0
_USER_AGENT = b"wsgw"


class HttpError(DataplaneError):
    """The server's answer was not a whole 200 response."""


class HttpStatusError(HttpError):
    """A response whose status is not 200 (RFC 9110 section 15); `body` is its start."""

    def __init__(self, message: str, status: int, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class TruncatedResponseError(HttpError):
    """The connection ended before the response did: no head, or fewer body bytes than its
    Content-Length, or no last chunk (RFC 9112 section 8: an incomplete message)."""


class HttpProtocolError(HttpError):
    """An answer h11 cannot read as HTTP/1.1, or a body longer than max_body."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class ResponseReader:
    """Sans-IO: one request out, its response in, from bytes sliced any way (h11 keeps
    what a read ends in the middle of). feed(b"") is the end of the stream."""

    def __init__(self, max_body: int = MAX_BODY) -> None:
        self._h11 = h11.Connection(h11.CLIENT)
        self._max_body = max_body
        self._head: h11.Response | None = None
        self._body: list[bytes] = []
        self._size = 0

    def request(self, host: str, target: str, headers: Sequence[tuple[str, str]] = ()) -> bytes:
        """The GET's bytes; `Connection: close` (RFC 9112 section 9.6): one request a
        connection, and the server may end a body by closing."""
        fields = [("Host", host), ("User-Agent", _USER_AGENT.decode()), ("Accept", "*/*")]
        fields += [*headers, ("Connection", "close")]
        request = h11.Request(method="GET", target=target, headers=fields)
        return (self._h11.send(request) or b"") + (self._h11.send(h11.EndOfMessage()) or b"")

    def feed(self, data: bytes) -> HttpResponse | None:
        """Bytes read (b"": the end of the stream); the response once it is whole."""
        self._h11.receive_data(data)
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                if not data:  # the end of the stream in the middle of a message
                    raise TruncatedResponseError(self._truncated()) from exc
                raise HttpProtocolError(f"not an HTTP/1.1 response: {exc}") from exc
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Response):
                self._head = event
            elif isinstance(event, h11.Data):
                self._size += len(event.data)
                if self._size > self._max_body:
                    raise HttpProtocolError(f"the body is longer than {self._max_body} bytes")
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                head = self._head
                assert head is not None  # h11 ends no message before its head
                return HttpResponse(head.status_code, list(head.headers), b"".join(self._body))
            elif isinstance(event, h11.ConnectionClosed):
                raise TruncatedResponseError(self._truncated())
            # InformationalResponse (1xx): the final response follows

    def _truncated(self) -> str:
        if self._head is None:
            return "the connection ended before the response's head"
        return f"the connection ended after {self._size} bytes of the body"


class _GetProtocol(asyncio.Protocol):
    """The asyncio side: the request out (through TLS for https), the reads into the
    ResponseReader, the outcome into `done`."""

    def __init__(self, reader: ResponseReader, request: bytes, tls: TlsClient | None) -> None:
        self._reader = reader
        self._request = request
        self._tls = tls
        self._transport: asyncio.Transport | None = None
        self._linger: asyncio.TimerHandle | None = None
        self.done: asyncio.Future[HttpResponse] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if self._tls is None:
            transport.write(self._request)
        else:  # the request waits in TlsClient until the handshake is done
            transport.write(self._tls.start())
            self._tls.send(self._request)

    def data_received(self, data: bytes) -> None:
        self._take(data)

    def eof_received(self) -> bool:
        self._take(b"")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if exc is None:
            self._take(b"")
        elif not self.done.done():
            self.done.set_exception(transport_error(exc, "reading the response"))

    def _take(self, data: bytes) -> None:
        """One read (b"": the end of the stream) through TLS into the reader."""
        if self.done.done():
            return
        try:
            response = None
            for piece in self._pieces(data):
                response = self._reader.feed(piece)
                if response is not None:
                    break
        except (HttpError, TlsError) as exc:
            self.done.set_exception(exc)
            self.finish()
            return
        if response is not None:
            self.done.set_result(response)
            self.finish()

    def _pieces(self, data: bytes) -> list[bytes]:
        """What the reader takes of a read: the plaintext, then b"" when the stream ended
        (TCP's end, or TLS's close_notify)."""
        tls = self._tls
        if tls is None:
            return [data]
        plain = tls.receive_data(data)
        out = tls.data_to_send()  # handshake answers, then the request once it is done
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(out)
        pieces = [plain] if plain else []
        if not data or tls.peer_closed:
            pieces.append(b"")
        return pieces

    def finish(self) -> None:
        """Close gracefully (close_notify, FIN), aborted if that takes CLOSE_LINGER_S."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._tls is not None:
            with contextlib.suppress(TlsError):
                transport.write(self._tls.close())
        transport.close()
        self._linger = asyncio.get_running_loop().call_later(CLOSE_LINGER_S, transport.abort)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


async def http_get(
    url: str,
    *,
    engine: Engine | None = None,
    timeout: float = 5.0,
    ca_file: str | None = None,
    verify: bool = True,
    server_hostname: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    max_body: int = MAX_BODY,
) -> HttpResponse:
    """GET url (http:// or https://) over the engine's stack (None: the kernel's sockets)
    and return the whole 200 response; `timeout` bounds it all, connect to last byte. TLS:
    certificates verified (the system's CAs or ca_file) against server_hostname or the
    URL's host. Raises what the module docstring lists."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise LocalProtocolError(f"{url!r} is not an http:// or https:// URL with a host")
    host = parts.hostname
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise LocalProtocolError(f"{url!r}: {exc}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    tls = None
    if scheme == "https":
        hostname = server_hostname or host
        tls = TlsClient(hostname, ca_file=ca_file, verify=verify, alpn_protocols=["http/1.1"])
    reader = ResponseReader(max_body)
    protocol = _GetProtocol(reader, reader.request(parts.netloc, target, headers), tls)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            if engine is None:
                try:
                    await loop.create_connection(lambda: protocol, host, port)
                except OSError as exc:
                    raise transport_error(exc, f"{host}:{port}") from exc
            else:
                await open_tcp(engine, host, port, protocol, timeout=timeout)
            response = await protocol.done
    except TimeoutError as exc:
        protocol.abort()
        if isinstance(exc, TransportError):
            raise
        raise TransportTimeoutError(f"GET {url}: no whole answer in {timeout} s") from None
    except BaseException:
        protocol.abort()
        raise
    if response.status != 200:
        raise HttpStatusError(
            f"GET {url}: {response.status}: {response.body[:200]!r}",
            response.status,
            response.body[:1024],
        )
    return response


def get_threadsafe(
    loop: asyncio.AbstractEventLoop, url: str, timeout: float, **options: Any
) -> bytes:
    """From a thread that is not loop's: http_get on loop (a session's: its engine's own
    loop, or the runtime's), blocking; the body. A loop that is gone is a TransportError."""
    try:
        future = asyncio.run_coroutine_threadsafe(http_get(url, timeout=timeout, **options), loop)
    except RuntimeError as exc:  # the loop is closed
        raise TransportError(f"GET {url}: the session's loop is gone ({exc})") from None
    try:
        return future.result(timeout + 1.0).body  # http_get times out first
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TransportTimeoutError(f"GET {url}: the session's loop did not answer") from None
    except concurrent.futures.CancelledError:
        raise TransportError(f"GET {url}: cancelled with the session's loop") from None
