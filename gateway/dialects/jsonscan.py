"""Key-path scanning of JSON text: the pure-Python twin of dataplane/shim/topic.c.

It follows the C scanner rule for rule (see wsgw_topic.h): the walk descends only along
the configured paths, skips everything else by bracket matching that knows strings, stops
once every path is found, and reports a span per path or MALFORMED with no spans. Being
byte-for-byte the same, it is the oracle the C code is tested against (next to json.loads
for valid JSON) and the fallback when the shim is not there. It is not fast; bursts on the
hot path go through the C batch (`TopicExtractor` picks).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from dataplane.shim import (
    JSON_ABSENT,
    JSON_ARRAY,
    JSON_FALSE,
    JSON_NULL,
    JSON_NUMBER,
    JSON_OBJECT,
    JSON_STRING,
    JSON_STRING_ESC,
    JSON_TRUE,
    TOPIC_MALFORMED,
    TOPIC_MAX_DEPTH,
    TOPIC_MAX_KEY,
    TOPIC_MAX_NESTING,
    TOPIC_MAX_PATHS,
    TOPIC_OK,
    TOPIC_PARTIAL,
    TOPIC_TOO_DEEP,
    TopicError,
    TopicPathComponent,
    TopicValueSpan,
)

_WS = frozenset(b" \t\n\r")
_TOKEN_END = frozenset(b' \t\n\r,:[]{}"')
_STRING_STOP = re.compile(rb'["\\]')
_BRACKET_STOP = re.compile(rb'["{}\[\]]')
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_LITERALS = {JSON_TRUE: b"true", JSON_FALSE: b"false", JSON_NULL: b"null"}
_SIMPLE_ESCAPES = {
    ord('"'): b'"',
    ord("\\"): b"\\",
    ord("/"): b"/",
    ord("b"): b"\b",
    ord("f"): b"\f",
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
}


def parse_path(text: str) -> tuple[TopicPathComponent, ...]:
    """'arg.instId' -> ('arg', 'instId'); 'data[0].symbol' -> ('data', 0, 'symbol')."""
    parts: list[TopicPathComponent] = []
    pos = 0
    for match in _PATH_PART.finditer(text):
        if match.start() != pos:
            raise TopicError(f"bad key path {text!r} at {pos}")
        key, index = match.groups()
        parts.append(int(index) if index is not None else key)
        pos = match.end()
        if pos < len(text) and text[pos] == ".":
            pos += 1
            if pos == len(text):
                raise TopicError(f"bad key path {text!r}: ends with a dot")
    if pos != len(text) or not parts:
        raise TopicError(f"bad key path {text!r}")
    return tuple(parts)


@dataclass(frozen=True)
class TopicPaths:
    """What a dialect extracts: up to 4 key paths, some only tested for presence."""

    paths: tuple[tuple[TopicPathComponent, ...], ...]
    presence: tuple[bool, ...] = ()
    strict: bool = False

    def __post_init__(self) -> None:
        if not 1 <= len(self.paths) <= TOPIC_MAX_PATHS:
            raise TopicError(f"{len(self.paths)} paths; 1..{TOPIC_MAX_PATHS} allowed")
        for path in self.paths:
            if not 1 <= len(path) <= TOPIC_MAX_DEPTH:
                raise TopicError(f"path {path!r}: depth must be 1..{TOPIC_MAX_DEPTH}")
            for c in path:
                if isinstance(c, int) and not 0 <= c <= 0xFFFF:
                    raise TopicError(f"array index {c} out of range")
                if isinstance(c, str) and len(c.encode()) > TOPIC_MAX_KEY:
                    raise TopicError(f"key {c!r} longer than {TOPIC_MAX_KEY} bytes")

    @classmethod
    def of(cls, *paths: str, presence: Sequence[str] = (), strict: bool = False) -> TopicPaths:
        """From text paths; those listed in presence are appended as presence-only."""
        parsed = [parse_path(p) for p in paths] + [parse_path(p) for p in presence]
        flags = (False,) * len(paths) + (True,) * len(presence)
        return cls(tuple(parsed), flags, strict)

    def is_presence(self, i: int) -> bool:
        return i < len(self.presence) and self.presence[i]


class _Malformed(Exception):
    pass


class _TooDeep(Exception):
    pass


class _Scan:
    __slots__ = ("done", "early", "keys", "msg", "n", "out", "paths", "pending")

    def __init__(self, msg: bytes, spec: TopicPaths) -> None:
        self.msg = msg
        self.n = len(msg)
        self.paths = spec
        self.keys: list[tuple[bytes | int, ...]] = [
            tuple(c.encode() if isinstance(c, str) else c for c in p) for p in spec.paths
        ]
        self.pending = (1 << len(spec.paths)) - 1
        self.early = not spec.strict
        self.done = False
        self.out = [TopicValueSpan(0, 0, JSON_ABSENT)] * len(spec.paths)

    def ws(self, p: int) -> int:
        msg, n = self.msg, self.n
        while p < n and msg[p] in _WS:
            p += 1
        return p

    def skip_string(self, p: int) -> tuple[int, bool]:
        """p just after an opening quote -> (just after the closing quote, escaped)."""
        esc = False
        while True:
            m = _STRING_STOP.search(self.msg, p)
            if m is None:
                raise _Malformed
            p = m.start()
            if self.msg[p] == 0x22:
                return p + 1, esc
            esc = True
            if self.n - p < 2:
                raise _Malformed
            p += 2

    def skip_open(self, p: int, is_object: bool) -> int:
        """p just after an opening bracket -> just after its match."""
        stack = [is_object]
        msg = self.msg
        while True:
            m = _BRACKET_STOP.search(msg, p)
            if m is None:
                raise _Malformed
            p = m.start()
            c = msg[p]
            if c == 0x22:
                p, _ = self.skip_string(p + 1)
                continue
            if c in (0x7B, 0x5B):
                if len(stack) >= TOPIC_MAX_NESTING:
                    raise _TooDeep
                stack.append(c == 0x7B)
            else:
                if stack.pop() != (c == 0x7D):
                    raise _Malformed
                if not stack:
                    return p + 1
            p += 1

    @staticmethod
    def kind_of(c: int) -> int:  # noqa: PLR0911 (one return per JSON value kind)
        if c == 0x22:
            return JSON_STRING
        if c == 0x7B:
            return JSON_OBJECT
        if c == 0x5B:
            return JSON_ARRAY
        if c == 0x74:
            return JSON_TRUE
        if c == 0x66:
            return JSON_FALSE
        if c == 0x6E:
            return JSON_NULL
        if c == 0x2D or 0x30 <= c <= 0x39:
            return JSON_NUMBER
        return JSON_ABSENT

    def skip_value(self, p: int, kind: int) -> tuple[int, bool]:
        if kind == JSON_STRING:
            return self.skip_string(p + 1)
        if kind in (JSON_OBJECT, JSON_ARRAY):
            return self.skip_open(p + 1, kind == JSON_OBJECT), False
        q = p
        msg, n = self.msg, self.n
        while q < n and msg[q] not in _TOKEN_END:
            q += 1
        if kind != JSON_NUMBER and msg[p:q] != _LITERALS[kind]:
            raise _Malformed
        return q, False

    @staticmethod
    def decode_key(raw: bytes) -> bytes | None:
        """The key as json.loads sees it, in UTF-8; None when it can match no key."""
        out = bytearray()
        unmatchable = False
        p, n = 0, len(raw)
        while p < n:
            c = raw[p]
            p += 1
            if c != 0x5C:
                out.append(c)
                continue
            if p >= n:
                raise _Malformed
            c = raw[p]
            p += 1
            if c in _SIMPLE_ESCAPES:
                out += _SIMPLE_ESCAPES[c]
                continue
            if c != 0x75:
                raise _Malformed
            cp = _hex4(raw, p)
            p += 4
            if 0xD800 <= cp <= 0xDBFF:
                if n - p >= 6 and raw[p] == 0x5C and raw[p + 1] == 0x75:
                    try:
                        lo = _hex4(raw, p + 2)
                    except _Malformed:
                        lo = -1
                    if 0xDC00 <= lo <= 0xDFFF:
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                        p += 6
                        out += chr(cp).encode()
                        continue
                unmatchable = True
                continue
            if 0xDC00 <= cp <= 0xDFFF:
                unmatchable = True
                continue
            out += chr(cp).encode()
        if unmatchable or len(out) > TOPIC_MAX_KEY:
            return None
        return bytes(out)

    def match_key(self, depth: int, mask: int, raw: bytes, esc: bool) -> int:
        key: bytes | None = raw
        if esc:
            key = self.decode_key(raw)
            if key is None:
                return 0
        sub = 0
        for i, comps in enumerate(self.keys):
            if mask >> i & 1 and comps[depth] == key:
                sub |= 1 << i
        return sub

    def member(self, p: int, depth: int, sub: int) -> int:  # noqa: PLR0912 (mirrors topic.c's member step for the differential tests)
        kind = self.kind_of(self.msg[p])
        if kind == JSON_ABSENT:
            raise _Malformed
        sub &= self.pending
        targets = descend = presence = 0
        for i, comps in enumerate(self.keys):
            if not sub >> i & 1:
                continue
            if depth + 1 == len(comps):
                targets |= 1 << i
                if self.paths.is_presence(i):
                    presence |= 1 << i
            elif (kind == JSON_OBJECT and not isinstance(comps[depth + 1], int)) or (
                kind == JSON_ARRAY and isinstance(comps[depth + 1], int)
            ):
                descend |= 1 << i
        if not targets and not descend:
            return self.skip_value(p, kind)[0]
        start, esc = p, False
        if descend:
            end = self.walk(p, depth + 1, descend, kind)
            if self.done:
                return end
        elif self.early and presence == targets and not (self.pending & ~targets):
            end = p
        else:
            end, esc = self.skip_value(p, kind)
            # A bare token running into the end of the input may be cut short.
            if end == self.n and JSON_NUMBER <= kind <= JSON_NULL:
                raise _Malformed
        for i in range(len(self.keys)):
            if not targets >> i & 1:
                continue
            if presence >> i & 1:
                self.out[i] = TopicValueSpan(start, 0, kind)
            elif kind == JSON_STRING:
                self.out[i] = TopicValueSpan(
                    start + 1, end - start - 2, JSON_STRING_ESC if esc else JSON_STRING
                )
            else:
                self.out[i] = TopicValueSpan(start, end - start, kind)
        self.pending &= ~targets
        if self.early and not self.pending:
            self.done = True
        return end

    def walk(self, p: int, depth: int, mask: int, kind: int) -> int:  # noqa: PLR0912 (mirrors topic.c's walk for the differential tests)
        msg, n = self.msg, self.n
        is_object = kind == JSON_OBJECT
        closer = 0x7D if is_object else 0x5D
        index = 0
        p = self.ws(p + 1)
        if p < n and msg[p] == closer:
            return p + 1
        while True:
            sub = 0
            if is_object:
                if p >= n or msg[p] != 0x22:
                    raise _Malformed
                key_start = p + 1
                p, esc = self.skip_string(key_start)
                sub = self.match_key(depth, mask, msg[key_start : p - 1], esc)
                p = self.ws(p)
                if p >= n or msg[p] != 0x3A:
                    raise _Malformed
                p = self.ws(p + 1)
            else:
                for i, comps in enumerate(self.keys):
                    if mask >> i & 1 and comps[depth] == index and isinstance(comps[depth], int):
                        sub |= 1 << i
                index += 1
            if p >= n:
                raise _Malformed
            p = self.member(p, depth, sub)
            if self.done:
                return p
            if not mask & self.pending:
                return self.skip_open(p, is_object)
            p = self.ws(p)
            if p >= n:
                raise _Malformed
            if msg[p] == 0x2C:
                p = self.ws(p + 1)
                continue
            if msg[p] == closer:
                return p + 1
            raise _Malformed

    def run(self) -> int:
        msg, n = self.msg, self.n
        p = self.ws(0)
        if p >= n:
            raise _Malformed
        kind = self.kind_of(msg[p])
        if kind in (JSON_OBJECT, JSON_ARRAY):
            mask = 0
            for i, comps in enumerate(self.keys):
                if isinstance(comps[0], int) == (kind == JSON_ARRAY):
                    mask |= 1 << i
            p = self.walk(p, 0, mask, kind) if mask else self.skip_value(p, kind)[0]
        elif kind != JSON_ABSENT:
            p = self.skip_value(p, kind)[0]
        else:
            raise _Malformed
        if not self.done and self.ws(p) != n:
            raise _Malformed
        return TOPIC_PARTIAL if self.pending else TOPIC_OK


def _hex4(raw: bytes, p: int) -> int:
    digits = raw[p : p + 4]
    if len(digits) != 4 or any(c not in b"0123456789abcdefABCDEF" for c in digits):
        raise _Malformed
    return int(digits, 16)


def scan(message: bytes, spec: TopicPaths) -> tuple[int, list[TopicValueSpan]]:
    """(status, one Span per path): the same answer as the C scanner, in Python."""
    state = _Scan(message, spec)
    empty = [TopicValueSpan(0, 0, JSON_ABSENT)] * len(spec.paths)
    try:
        status = state.run()
    except _Malformed:
        return TOPIC_MALFORMED, empty
    except _TooDeep:
        return TOPIC_TOO_DEEP, empty
    return status, state.out


def span_text(message: bytes, span: TopicValueSpan) -> str | None:
    """The decoded text of a string span (escapes resolved), None if it is not a string."""
    raw = message[span.offset : span.offset + span.length]
    if span.kind == JSON_STRING:
        return raw.decode("utf-8", "replace")
    if span.kind == JSON_STRING_ESC:
        import json

        try:
            value = json.loads(b'"' + raw + b'"')
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    return None
