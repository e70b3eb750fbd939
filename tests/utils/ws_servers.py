"""WebSocket servers written with code nobody here wrote, to run in the lab namespace.

    python ws_servers.py websockets|aiohttp HOST PORT [--tls CERT KEY] [--no-deflate]

Echo every message back (text as text, binary as binary); a message "close:CODE" makes
the server close with that code. Prints `ready` once listening.
"""

from __future__ import annotations

import asyncio
import ssl
import sys


def _tls(argv: list[str]) -> ssl.SSLContext | None:
    if "--tls" not in argv:
        return None
    i = argv.index("--tls")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(argv[i + 1], argv[i + 2])
    return context


async def run_websockets(host: str, port: int, tls: ssl.SSLContext | None, deflate: bool) -> None:
    import websockets

    async def echo(ws: websockets.ServerConnection) -> None:
        async for message in ws:
            if isinstance(message, str) and message.startswith("close:"):
                await ws.close(int(message[6:]), "asked to")
                return
            await ws.send(message)

    async with websockets.serve(
        echo, host, port, ssl=tls, max_size=None, compression="deflate" if deflate else None
    ):
        print("ready", flush=True)
        await asyncio.Future()


async def run_aiohttp(host: str, port: int, tls: ssl.SSLContext | None, deflate: bool) -> None:
    from aiohttp import WSMsgType, web

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0, compress=deflate)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                if msg.data.startswith("close:"):
                    await ws.close(code=int(msg.data[6:]), message=b"asked to")
                    break
                await ws.send_str(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
        return ws

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=tls).start()
    print("ready", flush=True)
    await asyncio.Future()


def main() -> None:
    kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tls = _tls(sys.argv)
    deflate = "--no-deflate" not in sys.argv
    runner = run_websockets if kind == "websockets" else run_aiohttp
    asyncio.run(runner(host, port, tls, deflate))


if __name__ == "__main__":
    main()
