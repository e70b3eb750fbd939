"""Reading a ring in a test: the records of one session (a group's hub id)."""

from __future__ import annotations

from collections.abc import Iterator

from dataplane.ring import RingMessage, RingReader


def records_of(reader: RingReader, session_id: int) -> Iterator[RingMessage]:
    """The records of session_id the reader has now. A lapped reader fails the test: what
    it missed would make the test's figures wrong, not its subject."""
    for event in reader.poll():
        assert type(event) is RingMessage, f"the reader was lapped: {event}"
        if event.session_id == session_id:
            yield event
