"""``evalfarm serve``: a read-only dashboard over a state dir and, optionally, the farm's Redis.

Modules: ``data`` (the one door into evalfarm internals), ``safe`` (untrusted values made safe),
``svg`` (server-side charts), ``templates``/``assets`` (pages, one stylesheet, one script),
``app`` (aiohttp routes, JSON API, guards), ``serve_metrics`` (/metrics of serve), ``metrics``
(worker-side Prometheus metrics), ``heartbeat`` (worker presence keys), ``cli`` (the command).
"""
