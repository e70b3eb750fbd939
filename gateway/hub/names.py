"""How a (session, topic) is named in the ring and on NATS: stable, injective, documented.

Ring topic names are `<session_id>:<topic>`, so one gateway ring carries every session and a
reader filters with `RingReader(topics=["3:btcusdt@trade", "3:*"])`. The ring stores names
of at most 56 bytes: a longer one keeps its first bytes and ends with `~` and 12 hex digits
of its SHA-256, which is still unique and still starts with `<session_id>:`. Gap events are
records of the reserved topic `$gap` (no session prefix, so no upstream topic can take it);
the session is the record's session_id and the payload the gap's JSON.

NATS subjects are `<prefix>.<session_id>.<token>`. A NATS subject token may not hold '.',
'*', '>' or whitespace; the token is the topic with every character outside
`A-Z a-z 0-9 - _ @ : # + = , ! % & ( ) [ ] { } | ^ / ?` written as `~XX` (`~` then two
upper-case hex digits per UTF-8 byte). So `btcusdt@trade` stays `btcusdt@trade`,
`BTC-USD.trades` becomes `BTC-USD~2Etrades` and `~` itself is `~7E`: the mapping is
reversible (`topic_from_token`) and two topics never share a subject. Gap events go to
`<prefix>.<session_id>.$gap` ('$' is always escaped in a topic, so this cannot collide).

Normalized events (gateway.normalize) made from a session's upstream topic T are published
as the session's topic `norm:T` (JSON) or `normbin:T` (MessagePack), so their ring names are
`<session_id>:norm:T` and their NATS subjects `<prefix>.<session_id>.norm:T`; upstream
topics starting so are refused (gateway.control.subscriptions), so the names stay apart.
"""

from __future__ import annotations

import hashlib
import re

from gateway.normalize.schema import TOPIC_PREFIXES, encoding_of

#: The ring topic of gap records (see the module docstring).
RING_GAP_TOPIC = "$gap"
#: The last subject token of NATS gap events.
NATS_GAP_TOKEN = "$gap"  # noqa: S105 (a subject token, not a secret)
RING_TOPIC_MAX = 56  # dataplane.ring.TOPIC_NAME_MAX, without importing the shim here
_HASH_SUFFIX = 13  # "~" + 12 hex digits

_SAFE = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_@:#+=,!%&()[]{}|^/?"
)
_ESCAPED = re.compile(r"~([0-9A-F]{2})")
_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def ring_topic(session_id: int, topic: str) -> str:
    """The ring topic name of a session's topic (see the module docstring)."""
    name = f"{session_id}:{topic}"
    raw = name.encode()
    if len(raw) <= RING_TOPIC_MAX:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    head = raw[: RING_TOPIC_MAX - _HASH_SUFFIX].decode(errors="ignore")
    return f"{head}~{digest}"


def ring_topic_session(name: str) -> int | None:
    """The session of a ring topic name (`ring_topic`'s prefix; a shortened name keeps it),
    None for the gap topic or a name not of this form."""
    head, sep, _ = name.partition(":")
    return int(head) if sep and head.isdigit() else None


def ring_topics(session_id: int, topics: list[str] | None, *, gaps: bool = True) -> list[str]:
    """The filter a ring reader passes for these topics of a session (None: all of them),
    with the gap topic unless gaps=False."""
    names = [f"{session_id}:*"] if topics is None else [ring_topic(session_id, t) for t in topics]
    return [*names, RING_GAP_TOPIC] if gaps else names


def topic_token(topic: str) -> str:
    """A topic as one NATS subject token (reversible, see the module docstring)."""
    if all(c in _SAFE for c in topic):
        return topic
    out: list[str] = []
    for c in topic:
        if c in _SAFE:
            out.append(c)
        else:
            out.extend(f"~{b:02X}" for b in c.encode())
    return "".join(out)


def topic_from_token(token: str) -> str:
    """The topic a subject token was made from (the inverse of topic_token)."""
    if "~" not in token:
        return token
    raw = bytearray()
    pos = 0
    for match in _ESCAPED.finditer(token):
        raw += token[pos : match.start()].encode()
        raw.append(int(match.group(1), 16))
        pos = match.end()
    raw += token[pos:].encode()
    return raw.decode()


def check_subject_prefix(prefix: str) -> str:
    """A subject prefix is one or more dot-separated tokens of letters, digits, '-' and '_'."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"NATS subject prefix {prefix!r} must be dot-separated tokens of letters, digits, "
            "'-' or '_' (e.g. 'wsgw' or 'md.gw1')"
        )
    return prefix


def nats_subject(prefix: str, session_id: int, topic: str) -> str:
    """`<prefix>.<session_id>.<token>`: where the sink publishes a session's topic."""
    return f"{prefix}.{session_id}.{topic_token(topic)}"


def nats_gap_subject(prefix: str, session_id: int) -> str:
    return f"{prefix}.{session_id}.{NATS_GAP_TOKEN}"


def normalized_topic(topic: str, encoding: str) -> str:
    """The topic under which the normalized events of upstream `topic` are published."""
    return TOPIC_PREFIXES[encoding] + topic


def upstream_of(topic: str) -> tuple[str, str] | None:
    """(encoding, upstream topic) of a normalized topic; None for an upstream topic."""
    return encoding_of(topic)


def is_reserved_topic(topic: str) -> bool:
    """Whether an upstream topic would read as a normalized one (refused)."""
    return encoding_of(topic) is not None
