"""Calling model endpoints: the OpenAI-compatible client (``openai``), retries honouring
Retry-After (``retry``), provider errors (``errors``), limits per endpoint and key (``limits``),
and one pooled HTTP client per event loop (``http``). The local scripted servers the tests and
demos talk to are in ``evalfarm/mock/``. Importing this package registers nothing: the engine's
registry names ``openai`` lazily.
"""
