"""Opening a connection for a session: resolve, pick the transport, read in bursts.

Both transports take the same options (`connect_kernel(url, **options)`,
`connect_dpdk(url, engine=..., **options)`), so a session builds the options once and only
the callable differs. Tests pass their own connector and resolver.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from dataplane.transports.base import WebSocketConnection
from dataplane.transports.connection import ConnectOptions
from dataplane.transports.kernel import connect_kernel
from dataplane.ws.errors import ConnectionClosed
from dataplane.ws.events import Message
from dataplane.ws.tls import client_context
from gateway.sessions.config import SessionConfig, SessionConfigError

if TYPE_CHECKING:
    from dataplane.engine import Engine

#: connect(url, **transport options) -> an open connection.
Connector = Callable[..., Awaitable[WebSocketConnection]]
#: resolve(host, port, family) -> addresses to try, in order.
Resolver = Callable[[str, int, int], Awaitable[list[str]]]


async def system_resolve(host: str, port: int, family: int = socket.AF_UNSPEC) -> list[str]:
    """The system resolver (getaddrinfo in asyncio's executor: /etc/hosts, DNS, nsswitch),
    duplicates removed, in the resolver's order (RFC 6724 preference)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def address_family(config: SessionConfig) -> int:
    """The DPDK stack speaks IPv4 only; the kernel takes whatever the resolver prefers."""
    return socket.AF_INET if config.transport == "dpdk" else socket.AF_UNSPEC


def connector_for(config: SessionConfig, engine: Engine | None) -> Connector:
    """connect_kernel, or connect_dpdk bound to the engine (SessionConfigError without one,
    or while dataplane.transports.dpdk does not exist)."""
    if config.transport == "kernel":
        return cast(Connector, connect_kernel)
    if engine is None:
        raise SessionConfigError("a dpdk session needs the DPDK engine; none was given")
    try:
        module = importlib.import_module("dataplane.transports.dpdk")
    except ImportError as exc:
        raise SessionConfigError(f"the dpdk transport is not available: {exc}") from None
    return cast(Connector, partial(module.connect_dpdk, engine=engine))


def tls_context(config: SessionConfig) -> ssl.SSLContext | None:
    """The client context for wss:// (None for ws://): TLS 1.2+, ALPN http/1.1 (RFC 6455
    over HTTP/1.1, not h2), the system CAs or tls.ca_file, verification unless turned off."""
    if not config.url.lower().startswith("wss:"):
        return None
    try:
        return client_context(
            config.tls.ca_file, verify=config.tls.verify, alpn_protocols=["http/1.1"]
        )
    except (OSError, ssl.SSLError) as exc:
        raise SessionConfigError(
            f"TLS set-up failed ({config.tls.ca_file}): {exc}", "tls.ca_file"
        ) from None


def transport_options(config: SessionConfig, context: ssl.SSLContext | None) -> ConnectOptions:
    """The options both transports take (connect_host/connect_port are added per address)."""
    return {
        "subprotocols": config.subprotocols,
        "extra_headers": config.extra_headers,
        "deflate": config.compression,
        "max_message_size": config.max_message_size,
        "max_frame_size": config.max_frame_size,
        "ssl_context": context,
        "server_hostname": config.tls.server_name,
        "open_timeout": config.open_timeout_s,
        "close_timeout": config.close_timeout_s,
    }


async def recv_batch(conn: WebSocketConnection, max_messages: int) -> list[Message]:
    """Wait for one message, then take every message the connection already holds (up to
    max_messages) without waiting again: one dialect scan and one hub call per burst.

    A connection with `recv_batch(max_messages)` of its own is asked directly. Otherwise
    each further recv() is started and kept only if it finishes without suspending; one
    that would wait is closed at once, which is recv() being cancelled before it took
    anything (the cancellation safety every asyncio recv() has)."""
    own = getattr(conn, "recv_batch", None)
    if own is not None:
        return cast(list[Message], await own(max_messages))
    batch = [await conn.recv()]
    while len(batch) < max_messages:
        message = _recv_ready(conn)
        if message is None:
            break
        batch.append(message)
    return batch


def _recv_ready(conn: WebSocketConnection) -> Message | None:
    """The next message if one is already queued, else None (nothing consumed)."""
    step = conn.recv()
    try:
        step.send(None)
    except StopIteration as done:
        return cast(Message, done.value)
    except ConnectionClosed:
        return None  # the next recv() raises it again, after this burst is handled
    step.close()
    return None
