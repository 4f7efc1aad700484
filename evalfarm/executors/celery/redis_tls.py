"""TLS for ``rediss://`` URLs, the same for the Celery broker, the result backend and the run store.

kombu alone treats a bare ``rediss://`` URL as "encrypt but verify nothing" (CERT_NONE, with a
warning); evalfarm verifies the server certificate unless the URL says otherwise:

    rediss://:PASSWORD@host:6380/0                         verify against the system CAs
    rediss://:PASSWORD@host:6380/0?ssl_cert_reqs=required  the same, said explicitly
    rediss://...?ssl_cert_reqs=none                        encrypt only (self-signed, no CA at hand)
    EVALFARM_REDIS_CA_CERTS=/path/ca.pem                   the CA bundle to verify with
    rediss://...?ssl_ca_certs=/path/ca.pem                 the same, per URL (wins over the variable)

``ssl_certfile`` / ``ssl_keyfile`` (client certificates) and ``ssl_check_hostname`` are accepted
in the query too. The ``ssl_*`` parameters are taken out of the URL and passed as options, so
kombu, Celery's result backend and redis-py all see the same settings.
"""
from __future__ import annotations

import os
import socket
import ssl
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CA_ENV = "EVALFARM_REDIS_CA_CERTS"
# every Redis client of the farm: a command on a half-open connection (a network partition) fails
# after this long instead of blocking until TCP gives up, and idle connections are probed
SOCKET_TIMEOUT_S = 15.0
KEEPALIVE = {opt: value for opt, value in ((getattr(socket, "TCP_KEEPIDLE", None), 10),
                                           (getattr(socket, "TCP_KEEPINTVL", None), 5),
                                           (getattr(socket, "TCP_KEEPCNT", None), 3)) if opt is not None}
_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE,
              "cert_required": ssl.CERT_REQUIRED, "cert_optional": ssl.CERT_OPTIONAL, "cert_none": ssl.CERT_NONE}
_KEYS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname")


def split_tls(url: str | None) -> tuple[str | None, dict[str, Any]]:
    """(the URL without ``ssl_*`` query parameters, TLS options); no options for non-TLS URLs."""
    if not url or not url.startswith("rediss://"):
        return url, {}
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = {k: v for k, v in query if k in _KEYS}
    rest = [(k, v) for k, v in query if k not in _KEYS]
    reqs = given.pop("ssl_cert_reqs", "required")
    if reqs.lower() not in _CERT_REQS:
        from ...errors import FarmError
        raise FarmError(f"rediss:// URL: ssl_cert_reqs={reqs!r}; use required, optional or none")
    opts: dict[str, Any] = {"ssl_cert_reqs": _CERT_REQS[reqs.lower()]}
    ca = given.pop("ssl_ca_certs", None) or os.environ.get(CA_ENV) or None
    if ca:
        opts["ssl_ca_certs"] = ca
    if "ssl_check_hostname" in given:
        opts["ssl_check_hostname"] = given.pop("ssl_check_hostname").lower() not in ("false", "0", "no")
    opts.update(given)  # certfile, keyfile
    return urlunsplit(parts._replace(query=urlencode(rest))), opts


_ASYNC_CLIENTS: dict[tuple[int, str], object] = {}


def pool_size() -> int:
    """Connections of a process's async Redis client, from the calls it may have in flight
    (``EVALFARM_MAX_IN_FLIGHT``, ``--concurrency`` in process): half of them, 8 to 64.
    ``EVALFARM_REDIS_CONNECTIONS`` sets it. Fleet slots use one connection per process whatever
    the calls (leases.py); the rest is the spend check and cache reads, a few hundred microseconds each."""
    from ...envvars import env_int
    from ...providers.limits import process_in_flight

    size = env_int("EVALFARM_REDIS_CONNECTIONS", None, 2, 10000)
    return size or max(8, min(64, process_in_flight() // 2))


def async_client(url: str):
    """One redis.asyncio client per (event loop, URL), with the same TLS options as the broker, on a
    bounded blocking pool: a command waits for a free connection, it never fails for want of one
    (redis-py 8's default pool raises ``MaxConnectionsError`` past 100 connections)."""
    import asyncio

    import redis.asyncio as aredis

    key = (id(asyncio.get_running_loop()), url)
    client = _ASYNC_CLIENTS.get(key)
    if client is None:
        plain, tls = split_tls(url)
        pool = aredis.BlockingConnectionPool.from_url(
            plain, max_connections=pool_size(), timeout=None, socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S, socket_keepalive=True, socket_keepalive_options=KEEPALIVE,
            **tls)
        client = _ASYNC_CLIENTS[key] = aredis.Redis(connection_pool=pool)
    return client


def fail_fast_client(url: str):
    """A redis-py client for readers that must not hang (the dashboard's pages, a worker's heartbeat):
    rediss:// verified like the farm's, 2 s to connect, 3 s a command, no retries (the run store
    retries for 30 s)."""
    import redis

    plain, tls = split_tls(url)
    return redis.Redis.from_url(plain, socket_connect_timeout=2, socket_timeout=3, retry_on_timeout=False, **tls)
