"""Opt-in response cache (`run --cache`): identical requests reuse a stored completion.

The key is the full request: the adapter's config (kind, version, model,
endpoint, params), the system and user messages, and the trial index, so
repeated trials stay independent samples. A cached item reports the tokens of
the original call and a cost of 0: nothing was spent this time.
"""
from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Protocol

from ..canonical import content_key
from ..perms import file_mode, make_dir
from ..spec.models import PromptSpec

CACHE_VERSION = 1


class ResponseCache(Protocol):
    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(self, key: str, value: dict[str, Any]) -> None: ...


def request_key(adapter_config: dict[str, Any], prompt: PromptSpec, trial: int) -> str:
    return content_key({"v": CACHE_VERSION, "adapter": adapter_config, "system": prompt.system,
                        "user": prompt.text, "trial": trial})


class SqliteCache:
    """A local cache file for the embedded farm (one writer at a time, WAL mode)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        make_dir(self.path.parent)
        new = not self.path.exists()
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        if new:  # SQLite would make it 0666 under umask 000
            os.chmod(self.path, file_mode())
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()

    def _get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def _put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, json.dumps(value)))
            self._db.commit()

    async def get(self, key: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._get, key)

    async def put(self, key: str, value: dict[str, Any]) -> None:
        await asyncio.to_thread(self._put, key, value)
