"""File and directory modes that do not depend on the umask being sane.

Under ``umask 000`` a plain ``mkdir`` or ``open(..., "w")`` leaves reports and audit files
world-writable. evalfarm creates its directories 0755 (0700 for secrets such as the audit
chain) and its files 0644 (0600), narrowed by the umask but never widened by it.
"""
from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o755
PRIVATE_DIR_MODE = 0o700
FILE_MODE = 0o644
PRIVATE_FILE_MODE = 0o600


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode(mode: int = FILE_MODE) -> int:
    """``mode`` narrowed by the umask."""
    return mode & ~umask()


def make_dir(path: Path | str, mode: int = DIR_MODE) -> Path:
    """Create ``path`` with ``mode`` and its missing parents with 0755, narrowed by the umask;
    existing directories are left as they are."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    for d in reversed(missing):
        want = file_mode(mode if d == path else DIR_MODE)
        try:
            d.mkdir(mode=want)
        except FileExistsError:
            continue
        os.chmod(d, want)  # exact, even where a default ACL on the parent would widen it
    return path


def can_create_in(folder: Path | str) -> str | None:
    """Why a file cannot be created in the existing directory ``folder``, else None. A real probe (a
    temporary file, removed at once): permission bits do not tell root about /proc, a read-only mount
    or an immutable directory."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=".evalfarm-probe-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(tmp)
    return None
