"""Pinned agent CLI versions: `make agents` / `make agents-all` install exactly these (the Makefile
reads the strings below), and the "not installed" message names them."""

CLAUDE = "2.1.197"  # @anthropic-ai/claude-code
CODEX = "0.171.0"  # @openai/codex
GEMINI = "0.61.0"  # @google/gemini-cli
OPENCODE = "1.18.33"  # opencode-ai
AIDER = "0.86.2"  # aider-chat (PyPI, in its own venv)
