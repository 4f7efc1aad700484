"""Breaks the engine on purpose (truncation is never detected): the selftest must notice."""
from evalfarm.core import taxonomy, verdict

_real = taxonomy.classify


def broken(outcome):
    mode = _real(outcome)
    return "instruction_miss" if mode == "truncation" else mode


verdict.classify = broken
