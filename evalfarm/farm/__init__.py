"""The farm: Celery app, tasks, run store, coordinator. Depends on the core, never the reverse."""
