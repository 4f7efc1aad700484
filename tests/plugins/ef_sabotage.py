"""Breaks the engine on purpose (truncation is never detected): the selftest must notice."""
from evalfarm import engine, taxonomy

_real = taxonomy.classify


def broken(outcome):
    mode = _real(outcome)
    return "instruction_miss" if mode == "truncation" else mode


engine.classify = broken
