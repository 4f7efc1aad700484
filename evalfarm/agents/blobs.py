"""Content-addressed files (an agent's patch, a check's full output): ``<dir>/<sha256>.<kind>``.

The directory is ``$EVALFARM_BLOB_DIR``, else ``$EVALFARM_STATE_DIR/blobs`` (default
``.evalfarm/blobs``) of the process that ran the agent (``evalfarm run`` sets it to its
``--state-dir``): on a farm give the spawn workers a shared volume there. A blob is written once (temp file, then rename), so concurrent writers of the same
content are harmless and a stored blob never changes.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def blob_dir() -> Path:
    explicit = os.environ.get("EVALFARM_BLOB_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("EVALFARM_STATE_DIR") or ".evalfarm") / "blobs"


def put(data: bytes, kind: str, directory: Path | None = None) -> str:
    """Store ``data``; returns its SHA-256 (the name under which it is found)."""
    digest = hashlib.sha256(data).hexdigest()
    directory = directory or blob_dir()
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
