"""A TCP proxy that adds latency, for hosts simulated with network namespaces.

This kernel has no ``netem`` qdisc, so a worker's link to Redis is slowed here instead: every
chunk read from one side is written to the other ``--delay-ms`` later, in order, without
holding back the chunks behind it (the delay is latency, not a bandwidth cap). Both directions
are delayed, so the round trip grows by twice ``--delay-ms``.

    python latency_proxy.py --listen 127.0.0.1:6390 --to 10.0.2.1:6379 --delay-ms 100
"""
from __future__ import annotations

import argparse
import asyncio
import time


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay_s, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0.0, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass
    writer.close()


async def main(listen: str, to: str, delay_ms: float) -> None:
    host, port = listen.rsplit(":", 1)
    up_host, up_port = to.rsplit(":", 1)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(up_host, int(up_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer, delay_ms / 1000), pipe(up_reader, writer, delay_ms / 1000))

    server = await asyncio.start_server(handle, host, int(port))
    print("proxy ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay-ms", type=float, default=100.0)
    a = ap.parse_args()
    asyncio.run(main(a.listen, a.to, a.delay_ms))
