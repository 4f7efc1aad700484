"""One Prometheus exposition format for every evalfarm ``/metrics``: the worker's (``evalfarm worker
--metrics-port``) and the dashboard's (``evalfarm serve``).

Both answer the classic text format, ``text/plain; version=0.0.4; charset=utf-8``, whatever the
scraper's Accept header: every Prometheus (and promtool, and VictoriaMetrics, and a curl) reads it,
and one format means one set of series names (OpenMetrics would add ``_created`` series on one side
only). Before, serve labelled the same bytes ``version=1.0.0`` and the worker ``0.0.4``.
"""
from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


def render(registry) -> tuple[bytes, str]:
    """(body, content type) of a registry's metrics."""
    return generate_latest(registry), CONTENT_TYPE


def serve(port: int, registry, addr: str = "0.0.0.0"):
    """Serve ``registry`` at ``/metrics`` (and ``/``) on ``addr:port`` from a daemon thread; returns the
    (server, thread), as prometheus_client's start_http_server does (``server.shutdown()`` stops it). An
    unusable port raises OSError here, before the thread starts."""
    import threading
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        allow_reuse_address = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:  # a scrape every few seconds is not worth a log line
            pass

    def app(environ, start_response):
        if environ.get("PATH_INFO") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics\n"]
        body, ctype = render(registry)
        start_response("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    server = make_server(addr, port, app, server_class=Server, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, name="evalfarm-metrics", daemon=True)
    thread.start()
    return server, thread
