"""One failure path: every way either transport fails maps to the TransportError family
with its FailureKind (the cause chained), and a session retries every one of them through
its Backoff, counting each by kind; only a configuration error ends it. The same session
against every transport, end to end, is tests/integration/test_session_failure_kinds.py."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable

import pytest

from dataplane.errors import (
    FailureKind,
    LocalResourceError,
    RefusedError,
    ResetError,
    ResolveError,
    TransportError,
    TransportTimeoutError,
    UnreachableError,
    transport_error,
)
from dataplane.stack.arp_cache import HostUnreachableError
from dataplane.stack.iface import NoRouteError
from dataplane.stack.ports import PortsExhaustedError
from dataplane.stack.tcp_errors import TcpRefusedError, TcpResetError, TcpTimeoutError
from dataplane.ws.errors import (
    ConnectionClosedError,
    ConnectionClosedOK,
    HandshakeRejected,
    LocalProtocolError,
    TlsCertificateError,
    TlsHandshakeError,
    failure_kind,
)
from gateway.sessions import ReconnectPolicy, State
from tests.unit.sessions.fakes import FakeNetwork, generic_responder, until
from tests.unit.sessions.test_sessions_session import config, run, session

K = FailureKind

# (what a transport's stack or the kernel raises, the family member it becomes)
MAPPED: list[tuple[BaseException, type[TransportError], FailureKind]] = [
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), RefusedError, K.REFUSED),
    (TcpRefusedError("connection refused: the peer answered with RST"), RefusedError, K.REFUSED),
    (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), ResetError, K.RESET),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), ResetError, K.RESET),
    (TcpResetError("connection reset by the peer"), ResetError, K.RESET),
    (TimeoutError(errno.ETIMEDOUT, "Connection timed out"), TransportTimeoutError, K.TIMEOUT),
    (TimeoutError(), TransportTimeoutError, K.TIMEOUT),
    (TcpTimeoutError("SYN unanswered after 6 retries"), TransportTimeoutError, K.TIMEOUT),
    (OSError(errno.EHOSTUNREACH, "No route to host"), UnreachableError, K.UNREACHABLE),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), UnreachableError, K.UNREACHABLE),
    (HostUnreachableError(0xC6120563, 3), UnreachableError, K.UNREACHABLE),
    (NoRouteError("no route to 10.1.1.1:443: off-subnet and no gateway"), UnreachableError,
     K.UNREACHABLE),
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), ResolveError, K.DNS),
    (PortsExhaustedError("all ephemeral ports in use", errno.EADDRNOTAVAIL), LocalResourceError,
     K.LOCAL),
    (OSError(errno.EMFILE, "Too many open files"), LocalResourceError, K.LOCAL),
]  # fmt: skip


@pytest.mark.parametrize(("raised", "family", "kind"), MAPPED, ids=lambda v: repr(v)[:40])
def test_either_transports_error_maps_to_one_family_member_by_errno(
    raised: BaseException, family: type[TransportError], kind: FailureKind
) -> None:
    error = transport_error(raised, "198.18.5.1:9400")
    assert type(error) is family
    assert error.kind is kind
    assert error.__cause__ is raised  # the original, for the log and the curious
    assert str(error).startswith("198.18.5.1:9400: ")
    assert isinstance(error, OSError)  # code that catches OSError around a connect still does
    assert transport_error(error, "again") is error  # a member is returned as it is


def test_the_same_condition_on_both_transports_is_the_same_type() -> None:
    kernel = transport_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "a")
    dpdk = transport_error(TcpRefusedError("refused: RST"), "a")
    assert type(kernel) is type(dpdk) is RefusedError
    assert kernel.errno == dpdk.errno == errno.ECONNREFUSED


def test_handshake_and_tls_failures_are_transport_errors_with_their_kind() -> None:
    assert HandshakeRejected("503", 503).kind is K.HANDSHAKE
    assert HandshakeRejected("bad accept", 101).kind is K.HANDSHAKE
    assert HandshakeRejected("closed before it answered", 0, closed=True).kind is K.EOF
    assert TlsHandshakeError("no shared cipher").kind is K.TLS
    assert TlsCertificateError("unknown CA").kind is K.CERTIFICATE
    for error in (HandshakeRejected("x", 503), TlsCertificateError("x")):
        assert isinstance(error, TransportError)
    assert not isinstance(LocalProtocolError("bad header"), TransportError)  # configuration


def _closed(code: int, cause: BaseException | None = None) -> ConnectionClosedError:
    error = ConnectionClosedError(code, "")
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("closed", "kind"),
    [
        (_closed(1006, transport_error(TcpResetError("reset"), "lost")), K.RESET),
        (_closed(1006, ConnectionResetError(errno.ECONNRESET, "reset")), K.RESET),
        (_closed(1006, TcpTimeoutError("retransmissions unanswered")), K.TIMEOUT),
        (_closed(1006), K.EOF),
        (_closed(1002), K.PROTOCOL),
        (_closed(1007), K.PROTOCOL),
        (_closed(1009), K.PROTOCOL),
        (_closed(1015), K.TLS),
        (_closed(1012), K.CLOSED),
        (ConnectionClosedOK(1001, "going away", clean=True), K.CLOSED),
    ],
    ids=["reset", "kernel-reset", "timeout", "eof", "1002", "1007", "1009", "1015", "1012", "1001"],
)
def test_a_lost_connection_is_classified_by_close_code_and_cause(
    closed: ConnectionClosedError, kind: FailureKind
) -> None:
    assert failure_kind(closed) is kind


# What each transport raises when an open fails, once it is mapped; the session must retry
# every one, whichever transport it came from.
OPEN_FAILURES: list[tuple[Callable[[], BaseException], FailureKind, str]] = [
    (lambda: transport_error(TcpRefusedError("RST to our SYN"), "10.0.0.1:9000"), K.REFUSED,
     "10.0.0.1:9000: RST to our SYN"),
    (lambda: ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), K.REFUSED,
     "Connection refused"),
    (lambda: transport_error(TcpResetError("reset"), "10.0.0.1:9000"), K.RESET, "reset"),
    (lambda: TransportTimeoutError("opening handshake took over 1 s"), K.TIMEOUT, "over 1 s"),
    (lambda: transport_error(HostUnreachableError(0x0A000001, 3), "10.0.0.1:9000"),
     K.UNREACHABLE, "no ARP reply"),
    (lambda: HandshakeRejected("x", 503, ((b"retry-after", b"0"),), b"busy"), K.HANDSHAKE,
     "handshake rejected with HTTP 503: busy"),
    (lambda: HandshakeRejected("x", 101, reason="Sec-WebSocket-Accept does not match"),
     K.HANDSHAKE, "handshake rejected: Sec-WebSocket-Accept does not match"),
    (lambda: HandshakeRejected("x", 0, reason="connection closed", closed=True), K.EOF,
     "handshake rejected: connection closed"),
    (lambda: TlsCertificateError("certificate verify failed"), K.CERTIFICATE,
     "TLS certificate rejected"),
    (lambda: TlsHandshakeError("alert handshake failure"), K.TLS, "alert handshake failure"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    OPEN_FAILURES,
    ids=[f"{k}-{i}" for i, (_, k, _) in enumerate(OPEN_FAILURES)],
)
def test_every_failed_open_is_retried_counted_by_kind_then_recovers(
    error: Callable[[], BaseException], kind: FailureKind, text: str
) -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder(), refuse=2, error=error)
        s, _, events = session(net)
        s.start()
        await until(lambda: s.state is State.STREAMING)
        assert s.counters.connect_failures == 2
        assert s.counters.failures == {kind: 2}
        backoffs = [e for e in events if e.kind == "state" and e.details["state"] == "backoff"]
        assert len(backoffs) == 2
        for event in backoffs:
            assert event.details["kind"] == kind
            assert event.reason.startswith("connect failed: ")
            assert text in event.reason
        assert events.states()[-3:] == ["connecting", "subscribing", "streaming"]
        await s.stop()

    run(scenario())


def test_a_dns_failure_is_retried_as_dns() -> None:
    tries: list[str] = []

    async def flaky(host: str, port: int, family: int) -> list[str]:
        tries.append(host)
        if len(tries) <= 2:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return ["127.0.0.1"]

    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        s, _, events = session(net)
        s._resolver = flaky
        s.start()
        await until(lambda: s.state is State.STREAMING)
        assert s.counters.failures == {"dns": 2}
        (first, _) = [e for e in events if e.kind == "state" and e.details["state"] == "backoff"]
        assert first.reason == (
            "connect failed: cannot resolve feed.test: Temporary failure in name resolution"
        )
        await s.stop()

    run(scenario())


def test_a_configuration_error_ends_the_session_at_once() -> None:
    async def scenario() -> None:
        bad = LocalProtocolError("header 'host' is set by the WebSocket handshake")
        net = FakeNetwork(generic_responder(), refuse=100, error=lambda: bad)
        s, _, events = session(net)
        s.start()
        await asyncio.wait_for(s.wait_closed(), 2)
        assert s.state is State.FAILED
        assert len(net.attempts) == 1  # no retry: it would fail the same way
        assert s.counters.connect_failures == 0
        assert events[-1].reason == f"configuration error: {bad}"

    run(scenario())


def test_a_lost_connection_is_counted_by_kind_and_one_the_exchange_asked_for_is_not() -> None:
    async def scenario() -> None:
        net = FakeNetwork(generic_responder())
        s, _, events = session(net, config(reconnect=ReconnectPolicy(0.001, max_delay_s=0.01)))
        s.start()
        await until(lambda: s.state is State.STREAMING)
        reset = ConnectionClosedError(1006, "connection lost")
        reset.__cause__ = transport_error(TcpResetError("reset by the peer"), "connection lost")
        net.last._end(reset)
        await until(lambda: s.counters.connects == 2 and s.state is State.STREAMING)
        net.last.drop(1002, "protocol error")
        await until(lambda: s.counters.connects == 3 and s.state is State.STREAMING)
        assert s.counters.failures == {"reset": 1, "protocol": 1}
        assert s.counters.connect_failures == 0  # each of them had opened
        kinds = [
            e.details["kind"]
            for e in [e for e in events if e.kind == "state" and e.details["state"] == "backoff"]
        ]
        assert kinds == ["reset", "protocol"]
        await s.stop()

    run(scenario())
