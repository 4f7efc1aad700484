"""aiohttp, imported without the two TLS contexts it builds at import time.

aiohttp's connector module creates a verified and an unverified default ``SSLContext`` when it is
imported, loading the system CA bundle twice: ~75 ms of every evalfarm command that calls a
provider, a tenth of a whole 1,000-item run at 0 ms latency. evalfarm never uses them: our
transport (``http.py``, httpx-aiohttp) hands aiohttp its own context on every connection
(``httpx.create_ssl_context``: verified for ``https://`` unless told otherwise). So they are built
here without loading certificates. That fails closed: a request that did reach aiohttp's default
verified context would find no trusted CA and be refused, never accepted unverified.
"""
from __future__ import annotations

import ssl
import sys


def _import() -> None:
    if "aiohttp.connector" in sys.modules:  # someone imported it first: nothing to save
        return
    create, load = ssl.create_default_context, ssl.SSLContext.set_default_verify_paths

    def bare(*args, **kwargs) -> ssl.SSLContext:  # verifies (CERT_REQUIRED, check_hostname) but trusts no CA
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    ssl.create_default_context, ssl.SSLContext.set_default_verify_paths = bare, lambda self: None
    try:
        import aiohttp.connector  # noqa: F401
    finally:
        ssl.create_default_context, ssl.SSLContext.set_default_verify_paths = create, load


_import()

import aiohttp  # noqa: E402

__all__ = ["aiohttp"]
