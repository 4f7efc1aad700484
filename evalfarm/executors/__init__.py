"""Backends execute a plan with the engine: ``inprocess`` (the embedded default: asyncio in this
process) and ``celery`` (the farm). ``base`` says what a backend is given and promises,
``store`` is the run store contract (and its in-memory implementation), ``finalize`` is the
aggregate both backends run once per run.
"""
