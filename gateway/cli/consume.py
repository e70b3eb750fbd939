"""`wsgw consume`: tail a stream from the shell, from this host's shared-memory ring or a
gateway's downstream WebSocket (/v1/stream).

`--normalized` decodes the messages of normalized subscriptions (JSON or binary, issue #21)
and prints each event as JSON; a plain `-t TOPIC` of a session then means its normalized
topics (`norm:TOPIC` and `normbin:TOPIC`)."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from dataplane.ring import WaitPolicy
    from gateway.client import Client


def consume(
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic", "-t", help="topic (repeatable); with --session, the session's topic name"
        ),
    ] = None,
    session: Annotated[int | None, typer.Option(help="session id the topics belong to")] = None,
    gateway: Annotated[
        str, typer.Option(help="gateway name: ring wsgw-<gateway>-messages")
    ] = "wsgw",
    url: Annotated[
        str | None,
        typer.Option(
            help="a gateway's stream instead of the local ring: ws://host:port/v1/stream?..."
        ),
    ] = None,
    token: Annotated[
        str | None, typer.Option(envvar="WSGW_TOKEN", help="API token (consume scope) for --url")
    ] = None,
    count: Annotated[int, typer.Option(help="stop after this many messages (0: never)")] = 0,
    timeout: Annotated[
        float, typer.Option(help="stop after this many idle seconds (0: never)")
    ] = 0.0,
    wait: Annotated[
        str,
        typer.Option(
            help="how the ring reader waits: auto (as the gateway's latency profile "
            "recommends), futex (sleep), spin[:us] (poll that long, then sleep) or busy "
            "(poll: a whole core, the lowest latency)"
        ),
    ] = "auto",
    follow: Annotated[
        bool,
        typer.Option(
            help="when the gateway restarts, go on with its new ring (prints RESTART first)"
        ),
    ] = False,
    normalized: Annotated[
        bool,
        typer.Option(
            "--normalized",
            help="decode normalized events (either encoding) and print them as JSON; with "
            "--session, -t TOPIC reads norm:TOPIC and normbin:TOPIC",
        ),
    ] = False,
) -> None:
    """Print one line per message (`seq topic payload`) and per gap (`GAP ...`); a first
    line on stderr says what is read and how the reader waits."""
    from dataplane.ring import WAIT_AUTO, WaitPolicy

    policy: WaitPolicy | None = None
    if wait.strip() != WAIT_AUTO:
        try:
            policy = WaitPolicy.parse(wait)
        except ValueError as exc:
            raise typer.BadParameter(
                f"{exc} (or auto: as the gateway recommends)", param_hint="--wait"
            ) from None
    if url is not None:
        if normalized:
            sys.exit(_normalized_stream(url, token, count, timeout))
        sys.exit(asyncio.run(_websocket(url, token, count, timeout)))
    if normalized and session is not None and topic:
        topic = normalized_topics(topic)
    sys.exit(_ring(gateway, session, topic, count, timeout, policy, follow, normalized))


def normalized_topics(topics: list[str]) -> list[str]:
    """A session's topics as their normalized ones: TOPIC -> norm:TOPIC, normbin:TOPIC (a
    subscription picks one encoding; the consumer need not know which)."""
    from gateway.hub.names import normalized_topic
    from gateway.normalize.schema import encoding_of

    out: list[str] = []
    for topic in topics:
        if encoding_of(topic) is not None:
            out.append(topic)
        else:
            out += [normalized_topic(topic, "json"), normalized_topic(topic, "binary")]
    return out


def _ring(
    gateway: str,
    session: int | None,
    topics: list[str] | None,
    count: int,
    timeout: float,
    policy: WaitPolicy | None = None,
    follow: bool = False,
    normalized: bool = False,
) -> int:
    from dataplane.ring import RingError, ring_name
    from gateway.client import Client
    from gateway.hub.names import ring_topics

    if session is not None:
        patterns: list[str] | None = ring_topics(session, topics or None)
    else:
        patterns = topics or None  # `<session>:<topic>` names or shell patterns
    try:
        client = Client.attach(
            "messages",
            gateway=gateway,
            topics=patterns,
            copy=True,
            wait=policy or "auto",
            follow=follow,
            normalized=normalized,
        )
    except RingError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        return 1
    # stderr: stdout carries only messages, for whatever reads them.
    print(
        f"consuming {ring_name(gateway, 'messages')}, wait {client.describe_wait()}",
        file=sys.stderr,
        flush=True,
    )
    return _print_events(client, count, timeout)


def _print_events(client: Client, count: int, timeout: float) -> int:
    """Print what the client reads (module doc) until count messages or timeout idle
    seconds; the exit status."""
    from dataplane.ring import Gap
    from gateway.client import NormalizedMessage, Restart
    from gateway.normalize.schema import encode_json

    seen = 0
    idle = 0.0
    try:
        while count == 0 or seen < count:
            events = client.read(timeout=0.5)
            if not events:
                idle += 0.5
                if timeout and idle >= timeout:
                    break
                continue
            idle = 0.0
            for event in events:
                if isinstance(event, Gap):
                    print(f"GAP lost={event.lost} first_seq={event.first_seq}", flush=True)
                    continue
                if isinstance(event, Restart):
                    print(f"RESTART epoch={event.epoch:016x}", flush=True)
                    continue
                if isinstance(event, NormalizedMessage):
                    payload = encode_json(event.event).decode()
                else:
                    payload = bytes(event.payload).decode(errors="replace")
                print(f"{event.seq} {event.topic} {payload}", flush=True)
                seen += 1
                if count and seen >= count:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    return 0 if seen or not count else 1


def _normalized_stream(url: str, token: str | None, count: int, timeout: float) -> int:
    """A gateway's /v1/stream through the SDK, which decodes the normalized messages."""
    from gateway.client import Client, SourceUnavailableError

    try:
        client = Client.connect(url, token=token, normalized=True)
    except (SourceUnavailableError, OSError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        return 1
    print(f"consuming {url} (normalized)", file=sys.stderr, flush=True)
    return _print_events(client, count, timeout)


async def _websocket(url: str, token: str | None, count: int, timeout: float) -> int:
    from dataplane.transports.kernel import connect_kernel
    from dataplane.ws.errors import ConnectionClosed

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    seen = 0
    try:
        async with connect_kernel(url, extra_headers=headers) as ws:
            while count == 0 or seen < count:
                try:
                    message = await asyncio.wait_for(ws.recv(), timeout or None)
                except TimeoutError:
                    break
                print(message.data.decode(errors="replace"), flush=True)
                seen += 1
    except ConnectionClosed as exc:
        typer.secho(f"stream closed: {exc}", fg=typer.colors.YELLOW, err=True)
    except OSError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        return 1
    return 0 if seen or not count else 1
