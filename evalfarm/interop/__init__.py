"""Interop with other eval tools: import promptfoo configs as evalfarm specs, export runs as
Inspect AI eval logs, JSONL and CSV, so nobody is locked into one tool's formats.
"""
