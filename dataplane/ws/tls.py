"""Sans-IO TLS client: `ssl.SSLObject` between two `ssl.MemoryBIO`s.

Ciphertext in, plaintext out; plaintext in, ciphertext out. No socket: the same object
runs over an OS socket (kernel transport) and over the user-space TCP stack (DPDK
transport). Certificates are verified by default (system CAs, or `ca_file`), with the host
name checked and sent as SNI.

    tls = TlsClient("feed.example")
    send(tls.start())                          # ClientHello
    plain = tls.receive_data(ciphertext)       # b"" until application data arrives
    send(tls.data_to_send())                   # handshake replies, tickets, alerts
    if tls.handshake_complete: send(tls.send(b"GET / ..."))
"""

from __future__ import annotations

import functools
import hashlib
import os
import ssl
from collections.abc import Sequence

from dataplane.ws.errors import (
    LocalProtocolError,
    TlsCertificateError,
    TlsError,
    TlsHandshakeError,
)

_READ_SIZE = 256 * 1024


def client_context(
    ca_file: str | os.PathLike[str] | None = None,
    *,
    verify: bool = True,
    alpn_protocols: Sequence[str] = (),
) -> ssl.SSLContext:
    """A client context: TLS 1.2+, the system's CAs (or ca_file's), host name checking.
    verify=False turns all verification off, for lab use only."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if alpn_protocols:
        context.set_alpn_protocols(list(alpn_protocols))
    return context


def shared_client_context(
    ca_file: str | os.PathLike[str] | None = None,
    *,
    verify: bool = True,
    alpn_protocols: Sequence[str] = (),
) -> ssl.SSLContext:
    """`client_context`, made once per set of options and kept: building one reads and
    parses the CA bundle (about 230 us a connection on the bench machine), and a context
    serves any number of connections. The CA file's content is part of the key (a digest:
    reading a few kB is cheap next to parsing them; a file's times are too coarse to tell
    two writes apart), so a replaced file gives a new context."""
    path = digest = None
    if ca_file is not None:
        path = os.fspath(ca_file)
        with open(path, "rb") as f:
            digest = hashlib.blake2b(f.read(), digest_size=16).digest()
    return _cached_context(path, digest, verify, tuple(alpn_protocols))


@functools.lru_cache(maxsize=32)
def _cached_context(
    path: str | None, _digest: bytes | None, verify: bool, alpn: tuple[str, ...]
) -> ssl.SSLContext:
    return client_context(path, verify=verify, alpn_protocols=alpn)


class TlsClient:
    """One TLS client session over caller-carried bytes."""

    def __init__(
        self,
        server_hostname: str | None,
        *,
        context: ssl.SSLContext | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        verify: bool = True,
        alpn_protocols: Sequence[str] = (),
    ) -> None:
        if context is not None and (ca_file is not None or not verify or alpn_protocols):
            raise LocalProtocolError("pass either a context or ca_file/verify/alpn, not both")
        if context is None:
            context = shared_client_context(ca_file, verify=verify, alpn_protocols=alpn_protocols)
        if context.check_hostname and not server_hostname:
            raise LocalProtocolError("host name checking needs a server_hostname")
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        try:
            self._ssl = context.wrap_bio(
                self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
            )
        except (ValueError, ssl.SSLError) as exc:
            raise TlsError(f"cannot start TLS for {server_hostname!r}: {exc}") from exc
        self.server_hostname = server_hostname
        self._started = False
        self._complete = False
        self._pending: list[bytes] = []  # plaintext sent before the handshake finished
        self.peer_closed = False  # close_notify or end of stream received
        self.truncated = False  # the stream ended without close_notify

    # ---- state ------------------------------------------------------------------------
    @property
    def handshake_complete(self) -> bool:
        return self._complete

    def version(self) -> str | None:
        return self._ssl.version()

    def cipher(self) -> tuple[str, str, int] | None:
        return self._ssl.cipher()

    def selected_alpn_protocol(self) -> str | None:
        return self._ssl.selected_alpn_protocol()

    def peer_certificate(self) -> dict[str, object] | None:
        cert = self._ssl.getpeercert()
        return dict(cert) if cert else None

    # ---- driving ----------------------------------------------------------------------
    def start(self) -> bytes:
        """Begin the handshake; returns the ClientHello."""
        if self._started:
            raise LocalProtocolError("the TLS handshake was already started")
        self._started = True
        self._handshake()
        return self.data_to_send()

    def data_to_send(self) -> bytes:
        """Ciphertext produced so far (handshake messages, records, alerts)."""
        return self._outgoing.read() if self._outgoing.pending else b""

    def receive_data(self, data: bytes) -> bytes:
        """Feed ciphertext (b"" at end of stream); returns the plaintext it completes.
        Raises TlsHandshakeError/TlsCertificateError during the handshake, TlsError after."""
        if not self._started:
            raise LocalProtocolError("call start() first")
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()
        if not self._complete:
            self._handshake()
            if not self._complete:
                if not data:
                    raise TlsHandshakeError("connection closed during the TLS handshake")
                return b""
        return self._read()

    def send(self, plaintext: bytes) -> bytes:
        """Encrypt plaintext; before the handshake ends it is held and sent after it."""
        if not self._complete:
            self._pending.append(bytes(plaintext))
            return b""
        if plaintext:
            try:
                self._ssl.write(plaintext)
            except ssl.SSLError as exc:
                raise TlsError(f"TLS write failed: {exc}") from exc
        return self.data_to_send()

    def close(self) -> bytes:
        """Our close_notify alert (RFC 8446 section 6.1); returns the bytes to send."""
        if self._complete:
            try:
                self._ssl.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                pass  # the peer's close_notify is not needed to send ours
            except ssl.SSLError as exc:
                raise TlsError(f"TLS close failed: {exc}") from exc
        return self.data_to_send()

    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return
        except ssl.SSLEOFError as exc:
            raise TlsHandshakeError(
                f"connection closed during the TLS handshake with {self.server_hostname!r}"
            ) from exc
        except ssl.SSLCertVerificationError as exc:
            raise TlsCertificateError(
                f"certificate of {self.server_hostname!r} did not verify: "
                f"{exc.verify_message or exc.reason}",
                exc.verify_code,
                exc.verify_message or "",
            ) from exc
        except ssl.SSLError as exc:
            raise TlsHandshakeError(f"TLS handshake with {self.server_hostname!r}: {exc}") from exc
        self._complete = True
        if self._pending:
            pending, self._pending = self._pending, []
            for chunk in pending:
                self._ssl.write(chunk)

    def _read(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self._ssl.read(_READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.peer_closed = True
                break
            except ssl.SSLEOFError:
                self.peer_closed = True
                self.truncated = True
                break
            except ssl.SSLError as exc:
                raise TlsError(f"TLS error from {self.server_hostname!r}: {exc}") from exc
            if not chunk:
                self.peer_closed = True
                break
            chunks.append(chunk)
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)
