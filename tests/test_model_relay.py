"""The sealed model path (issue 18) under the connection patterns real clients use: a real
`evalfarm mock-provider`, the task's relay (model_relay.py) on its unix socket and the jail's forwarder
(netns_relay.py) as a real process on a loopback port, as in a jail. Keep-alive clients (httpx over
aiohttp's pool, httpx's own pool, the stdlib's one connection) send many requests one after another and
many at once; every call must answer within its deadline, carry the real key upstream, and be counted
on the wire exactly as the server reported it."""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import httpx_aiohttp
import pytest

from conftest import free_port, wait_for
from evalfarm.agents.jail import FORWARDER
from evalfarm.agents.model_relay import TaskRelay
from providers_fixture import MockProviderProc

KEY = "sk-relay-real-key-0123456789"
DEADLINE_S = 60


class SealedPath:
    """mock-provider <- relay (this process) <- forwarder (a process, its own session) <- the client."""

    def __init__(self, tmp: Path, latency_ms: int = 20) -> None:
        self.server = MockProviderProc("--latency-ms", str(latency_ms), "--api-key", KEY)
        self.relay = TaskRelay(tmp / "m.sock", self.server.url, KEY)
        self.port = free_port()
        self.forwarder = subprocess.Popen(["/usr/bin/python3", "-I", "-S", str(FORWARDER), "--port", str(self.port),
                                           "--socket", str(tmp / "m.sock"), "--", "sleep", "600"],
                                          start_new_session=True, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)

        def listening() -> bool:
            assert self.forwarder.poll() is None, "the forwarder exited"
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return True
            except OSError:
                return False

        wait_for(listening, 20, "the forwarder's port")
        self.url = self.relay.inside_url(self.port)

    def close(self) -> dict:
        """Stop all three (again: nothing); the relay's counts."""
        if self.forwarder.returncode is None:
            os.killpg(self.forwarder.pid, signal.SIGKILL)  # the forwarder and its child
            self.forwarder.wait()
            self.relay.close()
            self.server.stop()
        return self.relay.counts.as_dict()


@pytest.fixture
def sealed(tmp_path):
    path = SealedPath(tmp_path)
    yield path
    path.close()


def body(i: int) -> dict:
    return {"model": "m-1", "messages": [{"role": "user", "content": f"question number {i}"}]}


async def through(url: str, token: str, transport: str, sequential: int, concurrent: int, in_flight: int) -> int:
    """``sequential`` calls one after another, then ``concurrent`` with ``in_flight`` at once, on one
    keep-alive pool of ``in_flight`` connections; the tokens the replies reported."""
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    pool = httpx_aiohttp.AiohttpTransport(limits=limits) if transport == "aiohttp" else None
    tokens = 0
    async with httpx.AsyncClient(transport=pool, limits=limits, timeout=20) as client:
        async def one(i: int) -> None:
            nonlocal tokens
            r = await client.post(f"{url}/chat/completions", headers={"Authorization": f"Bearer {token}"}, json=body(i))
            assert r.status_code == 200, r.text
            u = r.json()["usage"]
            tokens += u["prompt_tokens"] + u["completion_tokens"]

        for i in range(sequential):
            await one(i)
        sem = asyncio.Semaphore(in_flight)

        async def bounded(i: int) -> None:
            async with sem:
                await one(i)

        await asyncio.gather(*(bounded(i) for i in range(concurrent)))
    return tokens


@pytest.mark.parametrize("transport", ["aiohttp", "httpcore"])
def test_keep_alive_clients_through_the_relay_sequential_then_concurrent(sealed, transport):
    started = time.monotonic()
    seen = asyncio.run(asyncio.wait_for(through(sealed.url, sealed.relay.token, transport, 40, 256, 32), DEADLINE_S))
    wall = time.monotonic() - started
    counts = sealed.close()
    assert counts["requests"] == 296 and counts["refused"] == counts["upstream_errors"] == 0, counts
    assert counts["input_tokens"] + counts["output_tokens"] == seen
    print(f"\n{transport}: 40 sequential + 256 at 32 in flight through the relay in {wall:.2f} s")


def test_the_stdlib_keep_alive_connection_serves_many_requests_and_survives_idle(sealed):
    """One HTTP/1.1 connection, many requests on it (the forwarder pipes one connection to the relay for
    its whole life), then an idle pause and more on the same connection."""
    conn = http.client.HTTPConnection("127.0.0.1", sealed.port, timeout=DEADLINE_S)
    path = sealed.url.split(str(sealed.port), 1)[1] + "/chat/completions"
    local_ports = set()
    for i in range(30):
        if i == 20:
            time.sleep(1.5)  # idle on an open keep-alive connection (allowed here: the behaviour under test)
        conn.request("POST", path, body=json.dumps(body(i)),
                      headers={"Authorization": f"Bearer {sealed.relay.token}", "Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        assert r.status == 200, data
        assert r.getheader("Connection", "").lower() != "close"
        local_ports.add(conn.sock.getsockname()[1])
    conn.close()
    assert len(local_ports) == 1  # one connection all along
    counts = sealed.close()
    assert counts["requests"] == 30 and counts["refused"] == 0


def test_a_client_that_drops_its_connections_mid_request_leaves_the_path_working(sealed):
    """Clients cut connections while the relay waits on the model; later calls are still answered."""
    path = sealed.url.split(str(sealed.port), 1)[1] + "/chat/completions"
    payload = json.dumps(body(0)).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {sealed.relay.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", sealed.port), 5)
        s.sendall(head + payload)
        s.close()
    half = socket.create_connection(("127.0.0.1", sealed.port), 5)
    half.sendall(head)  # headers only, body never comes
    half.close()
    seen = asyncio.run(asyncio.wait_for(through(sealed.url, sealed.relay.token, "aiohttp", 5, 64, 16), DEADLINE_S))
    assert seen > 0
