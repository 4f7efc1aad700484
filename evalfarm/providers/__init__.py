"""Calling model endpoints: the OpenAI-compatible client (``openai``), retries honouring
Retry-After (``retry``), provider errors (``errors``), limits per endpoint and key (``limits``),
one pooled HTTP client per event loop (``http``), and ``mock_server``, the local scripted
server the tests and demos talk to. Importing this package registers nothing: the engine's
registry names ``openai`` lazily.
"""
