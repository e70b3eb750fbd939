"""The sans-IO TLS client against an in-memory TLS server (ssl.SSLObject + MemoryBIO on
both ends, a CA minted by trustme): no socket anywhere."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from dataplane.ws.client import WsClient
from dataplane.ws.errors import (
    LocalProtocolError,
    TlsCertificateError,
    TlsError,
    TlsHandshakeError,
)
from dataplane.ws.events import Handshake, Message
from dataplane.ws.handshake import accept_token
from dataplane.ws.tls import TlsClient, client_context, shared_client_context


class MemoryServer:
    """A TLS server over two MemoryBIOs, pumped by hand."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.done = False

    def receive(self, data: bytes) -> bytes:
        """Feed ciphertext, return plaintext received (after the handshake)."""
        if data:
            self.incoming.write(data)
        if not self.done:
            try:
                self.ssl.do_handshake()
                self.done = True
            except ssl.SSLWantReadError:
                return b""
        out = b""
        while True:
            try:
                chunk = self.ssl.read(65536)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                return out
            if not chunk:
                return out
            out += chunk

    def send(self, plaintext: bytes) -> bytes:
        self.ssl.write(plaintext)
        return self.outgoing.read()

    def pending(self) -> bytes:
        return self.outgoing.read()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("feed.test", "127.0.0.1").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path


def handshake(client: TlsClient, server: MemoryServer) -> bytes:
    """Pump until both ends are done; returns plaintext the server got meanwhile."""
    data = client.start()
    received = b""
    for _ in range(10):
        received += server.receive(data)
        client.receive_data(server.pending())
        data = client.data_to_send()
        if client.handshake_complete and not data:
            break
    return received + server.receive(data)


def test_handshake_and_data_both_ways(server_context: ssl.SSLContext, ca_file: Path) -> None:
    client = TlsClient("feed.test", ca_file=ca_file, alpn_protocols=["http/1.1"])
    server = MemoryServer(server_context)
    early = client.send(b"queued before the handshake")
    assert early == b""
    assert handshake(client, server) == b"queued before the handshake"
    assert client.handshake_complete
    assert client.version() in ("TLSv1.2", "TLSv1.3")
    assert client.cipher() is not None
    cert = client.peer_certificate()
    assert cert is not None and "subjectAltName" in cert
    server.receive(client.send(b"hello"))
    assert client.receive_data(server.send(b"x" * 100_000)) == b"x" * 100_000


def test_sni_is_sent(server_context: ssl.SSLContext, ca_file: Path) -> None:
    seen: list[str | None] = []

    def record(_obj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        seen.append(name)

    server_context.sni_callback = record
    try:
        handshake(TlsClient("feed.test", ca_file=ca_file), MemoryServer(server_context))
    finally:
        server_context.sni_callback = None
    assert seen == ["feed.test"]


def test_unknown_ca_is_a_certificate_error(server_context: ssl.SSLContext) -> None:
    client = TlsClient("feed.test", ca_file=None)  # system CAs: trustme's is not among them
    with pytest.raises(TlsCertificateError) as info:
        handshake(client, MemoryServer(server_context))
    assert info.value.verify_code != 0
    assert "certificate" in info.value.verify_message


def test_wrong_host_name_is_a_certificate_error(
    server_context: ssl.SSLContext, ca_file: Path
) -> None:
    client = TlsClient("other.test", ca_file=ca_file)
    with pytest.raises(TlsCertificateError, match=r"other\.test"):
        handshake(client, MemoryServer(server_context))


def test_verify_off_is_explicit(server_context: ssl.SSLContext) -> None:
    client = TlsClient("anything", verify=False)
    handshake(client, MemoryServer(server_context))
    assert client.handshake_complete


def test_garbage_and_early_eof_are_handshake_errors(ca_file: Path) -> None:
    client = TlsClient("feed.test", ca_file=ca_file)
    client.start()
    with pytest.raises(TlsHandshakeError):
        client.receive_data(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    client = TlsClient("feed.test", ca_file=ca_file)
    client.start()
    with pytest.raises(TlsHandshakeError, match="closed"):
        client.receive_data(b"")


def test_close_notify_and_truncation(server_context: ssl.SSLContext, ca_file: Path) -> None:
    client = TlsClient("feed.test", ca_file=ca_file)
    server = MemoryServer(server_context)
    handshake(client, server)
    with pytest.raises(ssl.SSLWantReadError):  # close_notify written, the reply not awaited
        server.ssl.unwrap()
    assert client.receive_data(server.pending()) == b""
    assert client.peer_closed and not client.truncated
    assert client.close()  # our close_notify

    client = TlsClient("feed.test", ca_file=ca_file)
    handshake(client, MemoryServer(server_context))
    assert client.receive_data(b"") == b""
    assert client.peer_closed and client.truncated


def test_corrupt_record_after_the_handshake_is_a_tls_error(
    server_context: ssl.SSLContext, ca_file: Path
) -> None:
    client = TlsClient("feed.test", ca_file=ca_file)
    server = MemoryServer(server_context)
    handshake(client, server)
    record = bytearray(server.send(b"secret"))
    record[-1] ^= 1
    with pytest.raises(TlsError):
        client.receive_data(bytes(record))


def test_misuse_raises() -> None:
    with pytest.raises(LocalProtocolError):
        TlsClient(None)  # checking host names needs one
    with pytest.raises(LocalProtocolError):
        TlsClient("h", context=client_context(), verify=False)
    client = TlsClient("h")
    with pytest.raises(LocalProtocolError):
        client.receive_data(b"x")
    client.start()
    with pytest.raises(LocalProtocolError):
        client.start()


def test_websocket_over_sans_io_tls(server_context: ssl.SSLContext, ca_file: Path) -> None:
    """The two sans-IO layers stacked, as the transports stack them."""
    tls = TlsClient("feed.test", ca_file=ca_file)
    server = MemoryServer(server_context)
    handshake(tls, server)
    ws = WsClient("feed.test", "/", secure=True, deflate=None)
    request = server.receive(tls.send(ws.initiate()))
    assert request.startswith(b"GET / HTTP/1.1\r\nHost: feed.test\r\n")
    key = next(
        line.split(b": ")[1]
        for line in request.split(b"\r\n")
        if line.startswith(b"Sec-WebSocket-Key")
    )
    response = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept_token(key) + b"\r\n\r\n\x81\x05hello"
    )
    ws.receive_data(tls.receive_data(server.send(response)))
    events = list(ws.events())
    assert isinstance(events[0], Handshake) and events[1] == Message(b"hello", True)


def test_the_context_for_a_ca_file_is_made_once(
    server_context: ssl.SSLContext, ca_file: Path, tmp_path: Path
) -> None:
    """Building a context parses the CA bundle: TlsClient reuses one per set of options,
    and a CA file replaced on disk (at once: same second, same size) gets its own."""
    first = shared_client_context(ca_file, alpn_protocols=["http/1.1"])
    assert shared_client_context(ca_file, alpn_protocols=["http/1.1"]) is first
    assert shared_client_context(ca_file) is not first
    assert shared_client_context(ca_file, verify=False) is not shared_client_context(ca_file)
    copy = tmp_path / "ca.pem"
    copy.write_bytes(ca_file.read_bytes())
    before = shared_client_context(copy)
    assert shared_client_context(copy) is before
    other = trustme.CA()
    copy.write_bytes(other.cert_pem.bytes())  # replaced: another CA now
    after = shared_client_context(copy)
    assert after is not before
    with pytest.raises(TlsCertificateError):  # and it is the new CA that is trusted
        handshake(TlsClient("feed.test", ca_file=copy), MemoryServer(server_context))
    with pytest.raises(FileNotFoundError):
        shared_client_context(tmp_path / "missing.pem")
