"""Simulated hosts for partition tests: Linux network namespaces joined by veth pairs.

    root ns (coordinator) --veth-- ns R (redis-server) --veth-- ns W1 (worker 1)
                                                      \\--veth-- ns W2 (worker 2)

Each namespace is a host with its own interfaces and routes; ``ip link set DEV down`` in a
worker's namespace cuts that host off from Redis (the kernel here has no ``netem``, so latency
comes from ``latency_proxy.py`` run inside the namespace). Needs root; everything made here is
removed on exit, processes first.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def why_not() -> str | None:
    """Why namespaces cannot be made here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns add)"
    if shutil.which("ip") is None:
        return "needs iproute2 (the ip command)"
    if shutil.which("redis-server") is None:
        return "needs redis-server"
    name = f"efprobe{os.getpid() % 100000}"
    res = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if res.returncode != 0:
        return f"cannot create a network namespace: {res.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


class Hosts:
    """Three namespaces (r, w1, w2) and the root namespace, on 10.231.{1,2,3}.0/24."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000}"
        self.ns = {h: f"ef{tag}{h}" for h in ("r", "w1", "w2")}
        # veth ends: (name in R, name on the other side, the other side's namespace or None = root)
        self.links = {"w1": (f"ef{tag}r1", f"ef{tag}w1", self.ns["w1"]),
                      "w2": (f"ef{tag}r2", f"ef{tag}w2", self.ns["w2"]),
                      "host": (f"ef{tag}r3", f"ef{tag}h", None)}
        self.subnet = {"w1": 1, "w2": 2, "host": 3}
        self.procs: list[subprocess.Popen] = []

    def redis_addr(self, side: str) -> str:
        """Redis's address as seen from ``side`` (w1, w2 or host)."""
        return f"10.231.{self.subnet[side]}.1"

    def __enter__(self) -> "Hosts":
        try:
            for ns in self.ns.values():
                _ip("netns", "add", ns)
                _ip("link", "set", "lo", "up", ns=ns)
            for side, (r_end, other_end, other_ns) in self.links.items():
                _ip("link", "add", r_end, "type", "veth", "peer", "name", other_end)
                _ip("link", "set", r_end, "netns", self.ns["r"])
                if other_ns:
                    _ip("link", "set", other_end, "netns", other_ns)
                n = self.subnet[side]
                _ip("addr", "add", f"10.231.{n}.1/24", "dev", r_end, ns=self.ns["r"])
                _ip("link", "set", r_end, "up", ns=self.ns["r"])
                _ip("addr", "add", f"10.231.{n}.2/24", "dev", other_end, ns=other_ns)
                _ip("link", "set", other_end, "up", ns=other_ns)
        except BaseException:
            self.close()
            raise
        return self

    def popen(self, host: str, args: list[str], **kw) -> subprocess.Popen:
        """Start ``args`` on ``host`` (r, w1, w2), in a session of its own."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns[host], *args], start_new_session=True, **kw)
        self.procs.append(proc)
        return proc

    def cut(self, host: str) -> None:
        _, other_end, other_ns = self.links[host]
        _ip("link", "set", other_end, "down", ns=other_ns)

    def restore(self, host: str) -> None:
        _, other_end, other_ns = self.links[host]
        _ip("link", "set", other_end, "up", ns=other_ns)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        for ns in self.ns.values():  # anything else still running in a namespace
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(0.2)
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.links["host"][1]], capture_output=True)  # the root-side end

    def __exit__(self, *exc) -> None:
        self.close()
