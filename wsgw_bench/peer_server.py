"""A kernel TCP peer for the lab namespace, written with the standard library only.

    python3 peer_server.py HOST PORT MODE [BYTES] [SEED]

Modes (one connection each, then exit):
  sink    read until EOF, then print `sha256 <hex> <count>`, close
  source  send BYTES of `payload(BYTES, SEED)`, then close (server sends FIN first)
  echo    echo every byte back until EOF, then close
  wait-close  read until EOF, then close (client sends FIN first)
  stall-sink  like sink, but with a 4 KiB receive buffer and a pause of BYTES/1000 ms
              before the first read: the sender meets a zero window for that long
Prints `ready` once listening, so the caller knows when to connect.
"""

from __future__ import annotations

import hashlib
import random
import socket
import sys


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def main() -> None:
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if mode == "stall-sink":
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server.bind((host, port))
    server.listen(1)
    print("ready", flush=True)
    conn, _ = server.accept()
    conn.settimeout(120)
    if mode == "stall-sink":
        import time

        time.sleep(size / 1000)
        mode = "sink"
    if mode == "sink":
        digest, count = hashlib.sha256(), 0
        while chunk := conn.recv(1 << 16):
            digest.update(chunk)
            count += len(chunk)
        print(f"sha256 {digest.hexdigest()} {count}", flush=True)
    elif mode == "source":
        conn.sendall(payload(size, seed))
    elif mode == "echo":
        while chunk := conn.recv(1 << 16):
            conn.sendall(chunk)
    elif mode == "wait-close":
        while conn.recv(1 << 16):
            pass
    else:
        raise SystemExit(f"unknown mode {mode}")
    conn.close()
    server.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
