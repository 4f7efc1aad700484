"""The run report: one shape for every executor, built in one streaming pass.

A report is a head (what ran, the per-adapter figures, thresholds, spend, and why it stopped early,
if it did) followed by the outcomes in plan order, one JSON object per line, then the prompts as
they were sent (one per line: what each case asked and how it is scored, so a reader or a re-score
needs no spec file). Its parts: ``model`` (``RunReport``, what a report is as a Python object),
``builder`` (the one streaming aggregation pass), ``framing`` (the file's bytes), ``schema`` (a
stored report checked as untrusted input) and ``markdown``. Both executors write reports through
these, so their reports are identical but for timings.
"""
