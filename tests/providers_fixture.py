"""A real `evalfarm mock-provider` in a subprocess."""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request

from conftest import EVALFARM, env_for, free_port


class MockProviderProc:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([*EVALFARM, "mock-provider", "--port", str(self.port), *args],
                                     env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(self.proc.stdout.read().decode())
                time.sleep(0.05)
        raise RuntimeError("mock-provider did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def stats_requests(self) -> list[dict]:
        """What each request asked (model, system, user), in arrival order."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats?requests=1", timeout=5) as r:
            return json.loads(r.read())["recent"]
