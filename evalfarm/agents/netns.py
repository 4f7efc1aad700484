"""``isolation: netns``: the agent runs in a fresh network namespace that reaches only the model
endpoint's port.

``unshare --net`` gives the agent a namespace with nothing but a loopback; ``netns_relay.py`` (the
agent's parent inside it) listens on 127.0.0.1:PORT there and forwards each connection through a unix
socket in the task's scratch dir (a file: it crosses network namespaces) to ``ModelRelay``, which runs
here and connects to the real endpoint. A model endpoint named by host name is mapped to 127.0.0.1 by
a private /etc/hosts (``unshare --mount``), so TLS to the real name keeps working; an IP literal is
rewritten to 127.0.0.1. Not root: ``--map-root-user`` adds a user namespace. DNS, other ports, other
hosts, the cloud metadata address: unreachable. Files and processes are not isolated by this.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .errors import AgentSetupError
from .netns_relay import pipe

RELAY = Path(__file__).with_name("netns_relay.py")


def endpoint(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    if not parts.hostname:
        raise AgentSetupError(f"isolation netns: cannot tell the model endpoint's host from {base_url!r}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def inside_url(base_url: str) -> tuple[str, str | None]:
    """(the URL the agent uses inside the namespace, the host name to map to 127.0.0.1 or None)."""
    host, port = endpoint(base_url)
    if host == "localhost":
        return base_url, None
    if _is_ip(host):
        parts = urlsplit(base_url)
        netloc = ("" if not parts.username else parts.netloc.rsplit("@", 1)[0] + "@") + f"127.0.0.1:{port}"
        return urlunsplit(parts._replace(netloc=netloc)), None
    return base_url, host


class ModelRelay:
    """Outside the namespace: accept on a unix socket, connect each client to (host, port)."""

    def __init__(self, sock_path: Path, host: str, port: int) -> None:
        self.path, self.host, self.port = sock_path, host, port
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(sock_path))
        os.chmod(sock_path, 0o600)
        self.server.listen(64)
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, name="evalfarm-netns-relay", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.host, self.port), timeout=30)
                upstream.settimeout(None)
            except OSError:
                conn.close()
                continue
            self.connections += 1
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        try:
            self.server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server.close()


def available() -> str | None:
    """None when namespaces can be made here, else why not (one line)."""
    if shutil.which("unshare") is None:
        return "isolation netns needs util-linux's `unshare` (apt install util-linux)"
    return None


def wrapper(port: int, sock_path: Path, hosts: str | None, hosts_file: Path) -> list[str]:
    """The argv prefix that runs a command inside a fresh network (and, for ``hosts``, mount) namespace."""
    why = available()
    if why:
        raise AgentSetupError(why)
    argv = ["unshare", "--net"]
    if hosts:
        argv.append("--mount")
    if os.geteuid() != 0:
        argv.append("--map-root-user")
    argv += ["--", sys.executable, "-I", str(RELAY), "--port", str(port), "--socket", str(sock_path)]
    if hosts:
        argv += ["--hosts", hosts, "--hosts-file", str(hosts_file)]
    return argv + ["--"]
