"""HTTP for provider calls: one POST on a pooled aiohttp session (one per event loop and scheme).

DESIGN.md measured httpx's own async transport at 44 req/s with 64 in flight at 200 ms latency and
httpx on the aiohttp transport at 278 req/s; 1,000 requests at 64 in flight and 200 ms took 3.33-3.39 s
on raw aiohttp and 3.49 s through httpx-aiohttp (building an ``httpx.Request`` and its headers per call
was ~12% of a farm worker's CPU). So the hot path is raw aiohttp, and this module is the one place that
knows it: callers get a ``Reply`` or one of our ``ProviderError``s, with the messages the httpx mapping
gave (a refused connection, a read timeout, a server that hung up, an untrusted certificate, a bad URL).

Certificates: ``https://`` verifies against ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else certifi's
bundle (what httpx did); ``http://`` needs no TLS context (building one loads the CA bundle, ~25 ms).
This module imports aiohttp (~0.1 s), so the providers import it at their first call, not when an
adapter is built: the farm's coordinator builds adapters for their keys and never calls them.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import ssl
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from yarl import URL

from ..redact import redact
from .aio import aiohttp
from .errors import CertificateError, ClientError, TransportError
from .limits import process_in_flight

_SESSIONS: dict[tuple[int, str], tuple[asyncio.AbstractEventLoop, "aiohttp.ClientSession"]] = {}
KEEPALIVE_S = 5.0  # an idle pooled connection is closed after this (httpx's default keep-alive expiry)


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes


def tls_context() -> ssl.SSLContext:
    """Verified TLS, trusting ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set, else certifi's bundle."""
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    try:
        import certifi
    except ImportError:  # the system's store
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def session(scheme: str) -> "aiohttp.ClientSession":
    """The session bound to the running loop for ``scheme``, made on first use; its pool holds twice the
    process's calls in flight (at least 16)."""
    loop = asyncio.get_running_loop()
    key = (id(loop), scheme)
    entry = _SESSIONS.get(key)
    if entry is None or entry[1].closed:
        connector = aiohttp.TCPConnector(limit=max(16, process_in_flight() * 2), keepalive_timeout=KEEPALIVE_S,
                                         ssl=tls_context() if scheme == "https" else False)
        s = aiohttp.ClientSession(connector=connector)
        if not _SESSIONS:
            atexit.register(close_all)
        _SESSIONS[key] = entry = (loop, s)
    return entry[1]


@lru_cache(maxsize=256)
def parsed(url: str) -> URL:
    """An endpoint's URL, parsed once (ValueError: it cannot be)."""
    return URL(url)


async def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float, connect_s: float,
               method: str = "POST") -> Reply:
    """One request (POST unless ``method`` says otherwise); a failure to connect, send or read is a
    TransportError (CertificateError for TLS, ClientError for a URL that cannot be requested)."""
    try:
        target = parsed(url)
    except ValueError as exc:
        raise ClientError(f"bad endpoint URL {url}: {redact(str(exc))}") from None
    timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_s, sock_read=timeout_s)
    try:
        async with session(target.scheme).request(method, target, data=body if method != "GET" else None, headers=headers,
                                           allow_redirects=False, timeout=timeout) as response:
            return Reply(response.status, response.headers, await response.read())
    except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as exc:
        why = getattr(exc, "certificate_error", None) or exc
        raise CertificateError(f"TLS: {url} presented a certificate this host does not trust "
                               f"({redact(str(why))[:300]}); if the server is yours, point SSL_CERT_FILE at the "
                               "CA bundle that signed it") from None
    except aiohttp.ServerDisconnectedError:
        raise TransportError(f"connection closed by the server at {url} before it answered (the request was "
                             "sent; look at the server's logs)") from None
    except aiohttp.ClientPayloadError as exc:
        raise TransportError(f"connection closed by the server at {url} in the middle of its answer "
                             f"({redact(str(exc))})") from None
    except aiohttp.SocketTimeoutError:
        raise TransportError(f"no answer from {url} within {timeout_s:g} s (ReadTimeout)") from None
    except (aiohttp.InvalidUrlClientError, aiohttp.NonHttpUrlClientError) as exc:
        raise ClientError(f"bad endpoint URL {url}: {redact(str(exc))}") from None
    except aiohttp.ClientConnectionError:  # refused, unreachable, connect timeout, reset
        raise TransportError(f"could not connect to {url} (refused or unreachable; connect timeout "
                             f"{connect_s:g} s)") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise TransportError(f"connection failed to {url}: {type(exc).__name__}: {redact(str(exc))}") from None
    except asyncio.TimeoutError:
        raise TransportError(f"no answer from {url} within {timeout_s:g} s (TimeoutError)") from None


def close_all(timeout_s: float = 2.0) -> None:
    """Close the pooled sessions whose loops still run (at exit: no 'Unclosed client session')."""
    for key, (loop, s) in list(_SESSIONS.items()):
        _SESSIONS.pop(key, None)
        if loop.is_running() and not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(s.close(), loop).result(timeout_s)
            except Exception:  # best effort at shutdown
                pass


async def close_current() -> None:
    """Close the running loop's sessions: a loop that ends (``asyncio.run``) must not leave them open."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _SESSIONS if k[0] == loop_id]:
        _, s = _SESSIONS.pop(key)
        await s.close()
