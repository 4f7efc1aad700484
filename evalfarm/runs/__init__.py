"""A run's whole life, in one layer: submit (the one place that picks an executor), budget, rescore,
deliver, the state dir's layout, the archive of reports, the registry and the spend ledger.

Callers (``cli``, ``ab``, ``selftest``, the Python API) come here; only this package calls the
executors.
"""
