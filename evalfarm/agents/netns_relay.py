"""Runs inside the agent's fresh network namespace (bwrap's, jail.py), as
the parent of the agent: brings the loopback up, optionally maps the model host to 127.0.0.1 in a
private /etc/hosts, listens on 127.0.0.1:PORT and relays every connection to a unix socket whose
other end (outside the namespace) connects to the model endpoint. Nothing else is reachable: the
namespace has no other interface and no route. Standalone (stdlib only): it runs as ``python -I``.

    netns_relay.py --port P --socket PATH [--hosts NAME --hosts-file FILE] -- AGENT ARGV...
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import fcntl
import socket
import struct
import subprocess
import sys
import threading

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP, MS_BIND = 0x8913, 0x8914, 0x1, 4096


def loopback_up() -> None:
    """Up the loopback unless it is already (bwrap brings it up; with no capabilities we could not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req)[:18])[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def private_hosts(name: str, hosts_file: str) -> None:
    """This mount namespace's /etc/hosts says ``name`` is 127.0.0.1 (TLS still checks the real name)."""
    with open(hosts_file, "w") as fh:
        fh.write(f"127.0.0.1\tlocalhost {name}\n::1\tlocalhost ip6-localhost\n")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(hosts_file.encode(), b"/etc/hosts", None, MS_BIND, None) != 0:
        raise OSError(ctypes.get_errno(), f"cannot bind {hosts_file} over /etc/hosts")


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass


async def _client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family != socket.AF_UNIX:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle wait on a reply's small writes
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
    for w in (writer, up_writer):
        w.close()


def serve_all(listeners: list, path: str) -> None:
    """One event loop (a thread) relays every connection: no thread per connection, no GIL convoy."""
    async def main() -> None:
        servers = [await asyncio.start_server(lambda r, w: _client(r, w, path), sock=s) for s in listeners]
        await asyncio.gather(*(s.serve_forever() for s in servers))

    asyncio.run(main())


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("netns_relay: usage: --port P --socket PATH [--hosts NAME --hosts-file F] -- ARGV...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="netns_relay")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--hosts")
    parser.add_argument("--hosts-file")
    opts = parser.parse_args(argv[:cut])
    command = argv[cut + 1:]
    loopback_up()
    if opts.hosts:
        private_hosts(opts.hosts, opts.hosts_file)
    listeners = []
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, opts.port))
            s.listen(64)
            listeners.append(s)
        except OSError:
            if family == socket.AF_INET:
                raise
    threading.Thread(target=serve_all, args=(listeners, opts.socket), daemon=True).start()
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
