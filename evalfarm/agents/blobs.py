"""Content-addressed files (an agent's patch, a check's full output): ``<dir>/<sha256>.<kind>``.

The directory is handed to the agent adapter by whoever runs it (``runs/`` in process: the run's
state dir's ``blobs``; a spawn worker: its own state dir, ``EVALFARM_STATE_DIR``, or
``EVALFARM_BLOB_DIR``): on a farm give the spawn workers a shared volume there. A blob is written
once (temp file, then rename), so concurrent writers of the same content are harmless and a stored
blob never changes.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def put(data: bytes, kind: str, directory: Path) -> str:
    """Store ``data`` under ``directory``; returns its SHA-256 (the name under which it is found)."""
    digest = hashlib.sha256(data).hexdigest()
    target = directory / f"{digest}.{kind}"
    if target.is_file():
        return digest
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{digest[:12]}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest
