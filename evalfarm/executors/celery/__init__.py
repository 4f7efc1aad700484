"""The farm backend: Celery workers over Redis running the same engine as the in-process backend.

``app`` (the Celery app: JSON only, late acks, one queue per pool), ``tasks`` (thin task
shells, registered by workers), ``work`` (what a batch does), ``coordinator`` (the
backend: plan into the store, dispatch, watch, resume, cancel), ``store`` (the run store
in Redis), ``pools`` and ``settings``, ``limits`` and ``cache`` (fleet-wide provider
limits and the shared response cache), ``broker_scan`` (what is still queued),
``redis_tls`` (rediss:// options shared by every client).
"""
