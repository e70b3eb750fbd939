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

import contextlib
import json
import socket
import sys
import threading
import time

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request


def handshake(conn: socket.socket) -> WSConnection:
    """The client's upgrade request, answered with a 101 (wsproto: RFC 6455 section 4.2)."""
    ws = WSConnection(ConnectionType.SERVER)
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        ws.receive_data(chunk)
        if any(isinstance(event, Request) for event in ws.events()):
            conn.sendall(ws.send(AcceptConnection()))
            return ws


def drain(conn: socket.socket, ws: WSConnection, closed: threading.Event) -> None:
    """Read the client's frames; answer its close frame with ours."""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            ws.receive_data(chunk)
            for event in ws.events():
                if isinstance(event, CloseConnection):
                    conn.sendall(ws.send(event.response()))
                    closed.set()
                    return
    except OSError:
        pass
    closed.set()


def serve(conn: socket.socket, script: list[list[object]], drop: bool) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ws = handshake(conn)
    closed = threading.Event()
    threading.Thread(target=drain, args=(conn, ws, closed), daemon=True).start()
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
