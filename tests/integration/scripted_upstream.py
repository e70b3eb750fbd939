"""A WebSocket server that sends a fixed byte stream with fixed write boundaries: the
upstream of the C feed path's differential tests (run in the lab's peer namespace).

    python scripted_upstream.py PORT SCRIPT.json      # prints "ready" once listening

SCRIPT.json: {"scripts": [[[hex, delay_s], ...], ...], "drop": [bool, ...]}. Connection k
gets scripts[k % len(scripts)]: each step's bytes in one write (TCP_NODELAY), then a pause
of delay_s; then, when drop[k % len] is true, the socket is closed without a closing
handshake (the client reconnects), else the connection stays until the client closes.
What the client sends (subscribe requests, pongs, its close) is read and ignored, but a
close frame is answered. Stops by itself after an hour.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import sys
import threading
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def handshake(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    key = b""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    conn.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )
    return rest


def drain(conn: socket.socket, closed: threading.Event) -> None:
    """Read the client's frames; answer its close frame with ours."""
    buf = b""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 2:
                n = buf[1] & 0x7F
                hlen = 2 + (2 if n == 126 else 8 if n == 127 else 0) + 4
                if len(buf) < hlen:
                    break
                if n == 126:
                    n = int.from_bytes(buf[2:4], "big")
                elif n == 127:
                    n = int.from_bytes(buf[2:10], "big")
                if len(buf) < hlen + n:
                    break
                opcode = buf[0] & 0x0F
                buf = buf[hlen + n :]
                if opcode == 8:
                    conn.sendall(b"\x88\x02\x03\xe8")
                    closed.set()
                    return
    except OSError:
        pass
    closed.set()


def serve(conn: socket.socket, script: list[list[object]], drop: bool) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    handshake(conn)
    closed = threading.Event()
    threading.Thread(target=drain, args=(conn, closed), daemon=True).start()
    try:
        for hex_bytes, delay in script:
            conn.sendall(bytes.fromhex(str(hex_bytes)))
            if delay:
                time.sleep(float(delay))  # type: ignore[arg-type]
        if drop:
            time.sleep(0.05)
            return
        closed.wait(600)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):  # a thread in recv keeps it open: FIN now
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()


def main() -> None:
    port = int(sys.argv[1])
    with open(sys.argv[2]) as f:
        spec = json.load(f)
    scripts, drops = spec["scripts"], spec["drop"]
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(8)
    server.settimeout(3600)
    print("ready", flush=True)
    k = 0
    while True:
        conn, _ = server.accept()
        index = k % len(scripts)
        threading.Thread(
            target=serve, args=(conn, scripts[index], drops[index]), daemon=True
        ).start()
        k += 1


if __name__ == "__main__":
    main()
