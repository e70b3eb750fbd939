"""dataplane.transports.http.ResponseReader, the sans-IO side of the REST snapshot GET: the
same answers fed whole and one byte at a time give the same response or the same error
(a read may end anywhere: in the head, in a chunk size, in a CRLF)."""

from __future__ import annotations

import pytest

from dataplane.transports.http import (
    HttpProtocolError,
    HttpResponse,
    ResponseReader,
    TruncatedResponseError,
)

BODY = b'{"lastUpdateId":42,"bids":[["1.00","2.0"]],"asks":[["1.10","3.0"]]}'


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


ANSWERS = {
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BODY),
    "chunk-ext": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"5;x=y\r\n"
    + BODY[:5]
    + b"\r\n"
    + chunked(BODY[5:], 1000),
    "close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY,
    "continue": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
    % (len(BODY), BODY),
}


def feed(data: bytes, step: int | None, *, eof: bool = True) -> HttpResponse | None:
    """The answer into a fresh reader, whole (step None) or step bytes a read, then the
    end of the stream; the response once whole."""
    reader = ResponseReader()
    reader.request("h", "/api/v3/depth?symbol=X")
    pieces = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    for piece in pieces:
        response = reader.feed(piece)
        if response is not None:
            return response
    return reader.feed(b"") if eof else None


def test_the_request_is_one_get_that_closes() -> None:
    request = ResponseReader().request("10.0.0.1:9000", "/api/v3/depth?symbol=BTCUSDT")
    head = request.decode().split("\r\n")
    assert head[0] == "GET /api/v3/depth?symbol=BTCUSDT HTTP/1.1"
    assert "host: 10.0.0.1:9000" in [h.lower() for h in head]
    assert "connection: close" in [h.lower() for h in head]
    assert request.endswith(b"\r\n\r\n")


@pytest.mark.parametrize("kind", ANSWERS)
@pytest.mark.parametrize("step", [None, 1, 2, 5])
def test_every_framing_whole_or_byte_at_a_time(kind: str, step: int | None) -> None:
    response = feed(ANSWERS[kind], step)
    assert response is not None
    assert (response.status, response.body) == (200, BODY)


@pytest.mark.parametrize("kind", ["length", "chunked"])
def test_a_framed_body_is_whole_before_the_end_of_the_stream(kind: str) -> None:
    response = feed(ANSWERS[kind], 1, eof=False)
    assert response is not None and response.body == BODY


def test_a_500_is_read_whole_with_its_status() -> None:
    answer = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops"
    for step in (None, 1):
        response = feed(answer, step)
        assert response is not None and (response.status, response.body) == (500, b"oops")


TRUNCATED = {
    "no head": b"",
    "half a head": b"HTTP/1.1 200 OK\r\nContent-Len",
    "short body": b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + BODY,
    "no last chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BODY)[:-5],
    "in a chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + BODY[:10],
}


@pytest.mark.parametrize("kind", TRUNCATED)
@pytest.mark.parametrize("step", [None, 1])
def test_an_answer_cut_short_is_truncated(kind: str, step: int | None) -> None:
    with pytest.raises(TruncatedResponseError):
        feed(TRUNCATED[kind], step)


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
@pytest.mark.parametrize("step", [None, 1])
def test_what_is_not_http_is_a_protocol_error(answer: bytes, step: int | None) -> None:
    with pytest.raises(HttpProtocolError):
        feed(answer, step)


def test_a_body_past_the_limit_is_refused() -> None:
    reader = ResponseReader(max_body=10)
    reader.request("h", "/")
    with pytest.raises(HttpProtocolError, match="longer than 10"):
        reader.feed(ANSWERS["length"])
