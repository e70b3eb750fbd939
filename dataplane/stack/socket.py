"""`TcpSocket`: the application's handle on one TCP connection.

A thin layer over the sans-IO `TcpConnection`: it adds the addresses, and an error the
interface found outside TCP (ARP gave up on the next hop), which wins over whatever the
connection itself would say. It moves no bytes: a driver (`StackRunner` or the engine)
polls the interface, which carries what `send` buffered and fills what `recv` drains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from dataplane.stack.tcp_errors import TcpError
from dataplane.wire.addr import int_to_ip

if TYPE_CHECKING:
    from dataplane.stack.tcp import TcpConnection, TcpState, TcpStats


class Endpoint(NamedTuple):
    ip: int
    port: int

    def __str__(self) -> str:
        return f"{int_to_ip(self.ip)}:{self.port}"


class TcpSocket:
    """One connection as the application sees it (send/recv/close, state and error)."""

    def __init__(self, connection: TcpConnection, local: Endpoint, remote: Endpoint) -> None:
        self.connection = connection
        self.local = local
        self.remote = remote
        self._error: TcpError | None = None

    def __repr__(self) -> str:
        return f"<TcpSocket {self.local} -> {self.remote} {self.state.name}>"

    # -- what the interface tells us ------------------------------------------------------

    def fail(self, error: TcpError) -> None:
        """Record an error found below TCP and abort the connection (first error wins)."""
        if self._error is None:
            self._error = error
        self.connection.abort()

    # -- application side -----------------------------------------------------------------

    @property
    def state(self) -> TcpState:
        return self.connection.state

    @property
    def error(self) -> TcpError | None:
        """Why the connection failed (interface-level errors first), None while healthy."""
        if self._error is not None:
            return self._error
        error: TcpError | None = self.connection.error
        return error

    @property
    def readable(self) -> bool:
        """Bytes wait in the receive buffer."""
        return bool(self.connection.readable)

    @property
    def at_eof(self) -> bool:
        """The peer sent FIN and everything before it has been read."""
        return bool(self.connection.at_eof)

    @property
    def writable(self) -> bool:
        return self._error is None and bool(self.connection.writable)

    @property
    def send_space(self) -> int:
        return 0 if self._error is not None else int(self.connection.send_space)

    @property
    def stats(self) -> TcpStats:
        return self.connection.stats

    def send(self, data: bytes | bytearray | memoryview) -> int:
        """Buffer as much of data as fits; returns how many bytes were taken."""
        if self._error is not None:
            raise self._error
        taken: int = self.connection.send(data)
        return taken

    def recv(self, max_bytes: int = 65536) -> bytes:
        """Up to max_bytes of received data; b"" when none is buffered (or at EOF)."""
        data: bytes = self.connection.recv(max_bytes)
        if not data and self._error is not None:
            raise self._error
        return data

    def close(self) -> None:
        """Send FIN after what is buffered (RFC 9293 section 3.10.4); reading stays possible."""
        if self._error is None:
            self.connection.close()

    def abort(self) -> None:
        """Drop the connection at once, with a RST when it is synchronised (section 3.10.5)."""
        self.connection.abort()
