"""An HTTP/1.1 server that answers the way a test scripts it: the REST snapshot server of
tests/integration/test_books_rest_dpdk.py (stdlib only: it starts fast in the lab's peer
namespace). Prints `ready` once listening.

    python faulty_http.py HOST PORT UPSTREAM MODE[,MODE...] [--tls DIR]

Request k is answered the way MODES[min(k, len - 1)] says (the last mode repeats); the
body is what GET http://UPSTREAM<same path> answers (the feed simulator's REST snapshot),
a fixed JSON when UPSTREAM is `-`, a snapshot of N levels a side when it is `-N`:

    length      Content-Length, the body written a few bytes a write (TCP_NODELAY)
    chunked     Transfer-Encoding: chunked, 7-byte chunks (8191 past 4 kB), a write each
    close       no length: the body ends with the connection (RFC 9112 section 6.3)
    500         500 Internal Server Error with a short JSON body
    truncated   Content-Length 100 more than sent, then FIN
    truncchunk  chunked without the last chunk, then FIN
    reset       the request read, then RST (SO_LINGER 0)
    silent      the request read, no answer (until the client gives up)
    garbage     an answer that is not HTTP

--tls DIR: TLS with DIR/server.pem and DIR/server.key (gateway.simulator.tls's files).
A `count` line on stdin is answered with the number of requests so far.
"""

from __future__ import annotations

import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request

FIXED = b'{"lastUpdateId":7,"bids":[["1.00","2.0"]],"asks":[["1.10","3.0"]]}'
served = 0
lock = threading.Lock()


def read_request(conn: socket.socket) -> str:
    """The request's target, once its head is read (a GET has no body)."""
    with conn.makefile("rb") as stream:
        line = stream.readline()
        while stream.readline() not in (b"\r\n", b""):
            pass
    return line.split(b" ", 2)[1].decode()


def levels_body(levels: int) -> bytes:
    """A Binance-shaped snapshot of `levels` levels a side (about 40 bytes a level)."""
    bids = ",".join(f'["{100000 - i}.00","{i % 97 + 1}.5"]' for i in range(levels))
    asks = ",".join(f'["{100001 + i}.00","{i % 89 + 1}.25"]' for i in range(levels))
    return f'{{"lastUpdateId":7,"bids":[{bids}],"asks":[{asks}]}}'.encode()


def body_of(upstream: str, path: str) -> bytes:
    if upstream == "-":
        return FIXED
    if upstream.startswith("-"):
        return levels_body(int(upstream[1:]))
    with urllib.request.urlopen(f"http://{upstream}{path}", timeout=5) as answer:
        body: bytes = answer.read()
        return body


def dribble(conn: socket.socket, data: bytes, size: int) -> None:
    for i in range(0, len(data), size):
        conn.sendall(data[i : i + size])
        time.sleep(0.0005)


def answer(conn: socket.socket, mode: str, upstream: str) -> None:
    path = read_request(conn)
    if mode == "silent":
        time.sleep(30)
        return
    if mode == "reset":
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return
    if mode == "garbage":
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        return
    if mode == "500":
        data = b'{"code":-1000,"msg":"internal"}'
        head = f"HTTP/1.1 500 Internal Server Error\r\nContent-Length: {len(data)}\r\n"
        conn.sendall(head.encode() + b"Content-Type: application/json\r\n\r\n" + data)
        return
    body = body_of(upstream, path)
    if mode in ("chunked", "truncchunk"):
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        size = 7 if len(body) < 4096 else 8191
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        out = [b"%x\r\n%s\r\n" % (len(c), c) for c in chunks]
        dribble(conn, head, 5)
        for piece in out:
            conn.sendall(piece)
        if mode == "chunked":
            conn.sendall(b"0\r\n\r\n")
        return
    length = len(body) + (100 if mode == "truncated" else 0)
    if mode == "close":
        head = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
    else:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % length
    dribble(conn, head + body, 3 if len(body) < 4096 else 997)


def serve(conn: socket.socket, modes: list[str], upstream: str) -> None:
    global served
    with lock:
        mode = modes[min(served, len(modes) - 1)]
        served += 1
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answer(conn, mode, upstream)
    except OSError:
        pass
    finally:
        conn.close()


def main() -> None:
    host, port, upstream, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    context = None
    if len(sys.argv) > 6 and sys.argv[5] == "--tls":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(f"{sys.argv[6]}/server.pem", f"{sys.argv[6]}/server.key")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(16)
    threading.Thread(target=commands, daemon=True).start()
    print("ready", flush=True)
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        conn, _ = listener.accept()
        if context is not None:
            try:
                conn = context.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                conn.close()
                continue
        threading.Thread(target=serve, args=(conn, modes.split(","), upstream), daemon=True).start()


def commands() -> None:
    for line in sys.stdin:
        if line.strip() == "count":
            with lock:
                print(served, flush=True)


if __name__ == "__main__":
    main()
