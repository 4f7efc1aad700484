"""Persisted runs: atomic JSON + Markdown + lineage stub, listing and lookup."""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ..canonical import sha256_hex
from ..core.report.framing import report_bytes
from ..core.report.markdown import render_markdown
from ..core.report.model import RunReport
from ..errors import UsageError
from ..names import is_run_id, run_id_problem
from ..perms import can_create_in, file_mode, make_dir
from .trust import read_report, seal

DEFAULT_STATE_DIR = Path(".evalfarm")
T = TypeVar("T")


def runs_dir(state_dir: Path | str) -> Path:
    return Path(state_dir) / "runs"


def write_stream(path: Path, chunks: Iterable[bytes]) -> str:
    """Write chunks so readers never see half a file; returns the SHA-256 of the bytes.

    A regular file is replaced atomically (temp file + rename, mode 0644 narrowed by the umask). A
    symlink is followed, and a device or pipe (``/dev/stdout``, a FIFO) is written in place:
    replacing those would destroy them.
    """
    import hashlib
    import stat

    path = Path(path)
    digest = hashlib.sha256()
    try:
        kind = os.stat(path).st_mode  # follows links, /dev/stdout's /proc link to a pipe included
    except FileNotFoundError:
        kind = None
    if kind is not None and not stat.S_ISREG(kind):
        with open(path, "wb") as fh:
            for chunk in chunks:
                digest.update(chunk)
                fh.write(chunk)
        return digest.hexdigest()
    if path.is_symlink():
        path = path.resolve()
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                digest.update(chunk)
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` atomically (see write_stream)."""
    write_stream(path, [data])


def check_writable(path: Path, what: str) -> None:
    """Before a run spends anything: a file we will write later must be writable, or exit 2 now."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} {path}: is a directory; give a file path")
    if path.exists() and not path.is_file():  # /dev/stdout, a FIFO: written in place, never replaced
        if not os.access(path, os.W_OK):
            raise UsageError(f"{what} {path}: not writable")
        return
    parent = path.resolve().parent if path.is_symlink() else path.parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{what} {path}: {probe} is not a directory")
    why = can_create_in(probe)
    if why:
        raise UsageError(f"{what} {path}: cannot create files in {probe} ({why})")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{what} {path}: the file is not writable")


def check_writable_dir(path: Path, what: str) -> None:
    """Before anything is spent: a directory we will create or write into later, or exit 2 now."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path}: is not a directory")
    check_writable(path / ".probe", what)


def check_state_dir(state_dir: Path) -> None:
    state_dir = Path(state_dir)
    if state_dir.exists() and not state_dir.is_dir():
        raise UsageError(f"--state-dir {state_dir}: is not a directory")
    check_writable(state_dir / "runs" / "probe.json", "--state-dir")


def _checked_runs_dir(state_dir: Path | str, run_id: object) -> Path:
    """``<state_dir>/runs``, created; a run id that is not one (``../x``, ``/abs/path``) is refused here,
    the last gate before a file name is built from it."""
    problem = run_id_problem(run_id)
    if problem:
        raise UsageError(f"refusing to save the run: {problem}")
    return make_dir(runs_dir(state_dir))


def save_report(report: RunReport | dict[str, Any], state_dir: Path | str = DEFAULT_STATE_DIR,
                raw: bytes | None = None, markdown: bytes | None = None, seal_kind: str = "saved") -> tuple[Path, Path]:
    """Persist ``<run_id>.json``, ``.md`` and ``.lineage.json`` and seal the report's hash in the
    registry (``runs.trust``); returns (json_path, md_path).

    Run ids carry a microsecond timestamp and a random suffix, and an existing file
    is never overwritten, so two runs in the same second both survive.
    """
    data = report.to_dict() if isinstance(report, RunReport) else report
    out = _checked_runs_dir(state_dir, data.get("run_id"))
    json_path, md_path = out / f"{data['run_id']}.json", out / f"{data['run_id']}.md"
    lineage_path = out / f"{data['run_id']}.lineage.json"
    if json_path.exists():
        raise UsageError(f"{json_path}: a run with this id is already saved; refusing to overwrite")
    body = raw if raw is not None else report_bytes(data)
    atomic_write(md_path, markdown if markdown is not None else render_markdown(data).encode("utf-8"))
    stub = {"artefact_path": str(json_path.resolve()), "content_hash": "sha256:" + sha256_hex(body),
            "lineage_tag": data["lineage_tag"], "ts_ns": time.time_ns()}
    seal(state_dir, data["run_id"], stub["content_hash"], seal_kind)
    atomic_write(lineage_path, (json.dumps(stub, indent=2) + "\n").encode())
    atomic_write(json_path, body)  # last: a run is listed only once all three exist
    return json_path, md_path


def save_report_stream(summary: dict[str, Any], chunks: Iterable[bytes], state_dir: Path | str,
                       markdown: bytes, lineage: dict[str, Any] | None = None,
                       seal_kind: str = "saved") -> tuple[Path, Path]:
    """Like save_report, for a report too big to hold: its bytes arrive in chunks. ``lineage``: more
    fields for the lineage stub (a re-scored run's ``source_run``)."""
    out = _checked_runs_dir(state_dir, summary.get("run_id"))
    json_path, md_path = out / f"{summary['run_id']}.json", out / f"{summary['run_id']}.md"
    if json_path.exists():
        raise UsageError(f"{json_path}: a run with this id is already saved; refusing to overwrite")
    tmp_json = out / f".{summary['run_id']}.json.partial"
    digest = write_stream(tmp_json, chunks)
    try:
        atomic_write(md_path, markdown)
        stub = {"artefact_path": str(json_path.resolve()), "content_hash": "sha256:" + digest,
                "lineage_tag": summary["lineage_tag"], "ts_ns": time.time_ns(), **(lineage or {})}
        seal(state_dir, summary["run_id"], stub["content_hash"], seal_kind)
        atomic_write(out / f"{summary['run_id']}.lineage.json", (json.dumps(stub, indent=2) + "\n").encode())
        os.replace(tmp_json, json_path)  # last: a run is listed only once all three exist
    finally:
        tmp_json.unlink(missing_ok=True)
    return json_path, md_path


def list_runs(state_dir: Path | str = DEFAULT_STATE_DIR) -> list[Path]:
    """Persisted run JSON files, newest first (run ids sort by time), stubs excluded."""
    folder = runs_dir(state_dir)
    if not folder.is_dir():
        return []
    files = [p for p in folder.glob("*.json") if not p.name.endswith(".lineage.json")]
    return sorted(files, key=lambda p: p.name, reverse=True)


def resolve_run(ref: str, state_dir: Path | str = DEFAULT_STATE_DIR) -> Path:
    """A run by path, id or unique id prefix."""
    path = Path(ref)
    if path.is_file():
        return path
    folder = runs_dir(state_dir)
    exact = folder / f"{ref}.json"
    if is_run_id(ref) and exact.is_file():  # only a real id becomes a file name (never "../x")
        return exact
    matches = [p for p in list_runs(state_dir) if ref and p.stem.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UsageError(f"run reference {ref!r} is ambiguous: matches {', '.join(p.stem for p in matches[:5])}")
    raise UsageError(f"run {ref!r} not found (not a file, and no run id under {folder}); "
                     "see 'evalfarm list'")


def load_report(path: Path) -> dict[str, Any]:
    """A stored report, checked for the shape every reader relies on and against the lineage stub
    saved beside it (an edited report is exit 2: ``runs.trust``)."""
    return read_report(path)[0]


def load_head(path: Path) -> dict[str, Any]:
    """``load_report`` without holding the report: its head (no outcomes, no prompts), after the same
    checks, made in one streamed pass (``runs.report_stream``): every outcome's shape, the prompts
    section, the file's hash against the lineage stub. A file not in the streamed layout, or one with
    a problem, is read whole (``read_report``): the same one-line errors as ``load_report``."""
    from ..core.report.schema import head_problem, outcome_problem
    from .report_stream import NotStreamed, ReportStream
    from .trust import check_lineage

    path = Path(path)
    try:
        with ReportStream(path) as rs:
            head = rs.head
            if head_problem(head):
                raise NotStreamed("head")
            for i, o in enumerate(rs.outcomes()):
                if outcome_problem(i, o):
                    raise NotStreamed("outcome")
            digest = rs.finish()
            if rs.prompts_problem:
                raise NotStreamed("prompts")
    except (NotStreamed, OSError):
        report = read_report(path)[0]
        return {k: v for k, v in report.items() if k not in ("outcomes", "prompts")}
    check_lineage(path, digest)
    return head


def require_complete(report: dict[str, Any], where: str) -> dict[str, Any]:
    """A partial report (interrupted, stopped early) is refused wherever a whole run is compared."""
    reason = report.get("stopped")
    if reason:
        raise UsageError(f"{where}: run {report.get('run_id')} is partial (stopped: {reason}; "
                         f"{report.get('items_done')} of {report.get('items_planned')} items measured); "
                         "diff, gate and baselines need a complete run")
    return report


def iter_outcomes(path: Path) -> Iterator[dict[str, Any]]:
    """A stored report's outcomes read a line at a time (``runs.report_stream``: the report writes one
    outcome per line), so a 100,000-item run is never held whole. A file not in that layout (reformatted,
    or written by another tool) raises ValueError, possibly after some outcomes: a caller that wants to
    fall back to reading the file whole starts over (``outcomes_of``)."""
    from .report_stream import ReportStream

    with ReportStream(path) as rs:
        for item in rs.outcomes():
            if not isinstance(item, dict):
                raise ValueError("not an outcome")
            yield item


def outcomes_of(path: Path, consume: Callable[[Iterable[dict[str, Any]]], T]) -> T:
    """``consume`` the report's outcomes streamed, or, for a file not in the streamed layout, read whole."""
    try:
        return consume(iter_outcomes(path))
    except ValueError:
        with open(path, encoding="utf-8") as fh:
            return consume(json.load(fh).get("outcomes") or [])


def save_index(json_path: Path, chunks: Iterable[bytes]) -> Path | None:
    """Put a report's case index (``core/report/index.py``) beside the saved report, stamped with the
    file's identity (size, mtime, inode, the hash its lineage stub records): a reader trusts it only for
    that very file. Nothing is written when the index does not describe a file of this size."""
    from ..core.report.index import MAGIC

    it = iter(chunks)
    first = b""
    for chunk in it:
        first += chunk
        if b"\n" in first[len(MAGIC):]:
            break
    if not first.startswith(MAGIC):
        return None
    nl = first.index(b"\n", len(MAGIC))
    header = json.loads(first[len(MAGIC):nl])
    st = os.stat(json_path)
    if (header.get("report") or {}).get("size") != st.st_size:
        return None
    stub = json.loads(json_path.with_name(json_path.name[:-5] + ".lineage.json").read_bytes())
    header["report"] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
                        "digest": stub.get("content_hash")}
    out = json_path.with_name(json_path.name[:-5] + ".index")

    def patched() -> Iterator[bytes]:
        yield MAGIC + json.dumps(header).encode() + b"\n" + first[nl + 1:]
        yield from it

    write_stream(out, patched())
    return out
