"""A run's archive: where a farm run's plan and finished outcomes live instead of Redis.

Redis holds only what is in flight (queue messages, a bit per finished batch, counters, leases);
everything a run has finished is here, so a Redis flush or restart loses nothing already archived
and a million-item run costs Redis the same as a thousand-item one.

Layout under ``<root>/<run_id>/`` (one writer per file, every file written whole and atomically):

    meta.json               the run's meta once its plan is complete (``resume`` after a flush reads it)
    plan/<seg>.jsonl        segment ``seg`` of the plan: one item's JSON a line, in plan order
    prompts/<seg>.jsonl     the prompts first seen in that segment (the report's ``prompts`` section)
    out/<seg>.jsonl         the segment's finished outcomes, one a line, written by the worker that ran it
    report/outcomes.part    the report's outcome lines, framed as in the report file
    report/prompts.part     its prompt lines
    report/index.part       the report's case index (core/report/index.py): where each outcome line is
    report/head.json        the report's head, written last: its presence means the report is complete

A segment is a dispatch batch: segment ``n`` holds plan positions ``n*B .. n*B+B-1`` (B, the run's
batch size), so the plan order is the segments' order and the index of "which item is where" is
arithmetic. Why JSONL segments and not one appended file: a shared volume gives no safe concurrent
append and S3 has no append at all; one file per batch has exactly one writer, is replaced whole by a
redelivered batch (idempotent), and the report is the segments concatenated in order (flat memory).

Two stores: a directory every worker mounts (``/data/archive``), or an S3-compatible bucket
(``s3://bucket/prefix``, through boto3; ``EVALFARM_S3_ENDPOINT_URL`` for MinIO, moto and the like).
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Iterable, Iterator

ENV = "EVALFARM_ARCHIVE"
ENDPOINT_ENV = "EVALFARM_S3_ENDPOINT_URL"
CHUNK = 1 << 20


class Archive(ABC):
    """Whole objects by name (``run/plan/000001.jsonl``): put atomically, read, stream, list."""

    url: str

    @abstractmethod
    def put(self, name: str, chunks: Iterable[bytes]) -> int:
        """Write the object from ``chunks`` (readers never see half of it); returns its size."""

    @abstractmethod
    def get(self, name: str) -> bytes | None: ...

    @abstractmethod
    def stream(self, name: str, chunk: int = CHUNK) -> Iterator[bytes]: ...

    @abstractmethod
    def size(self, name: str) -> int | None: ...

    @abstractmethod
    def names(self, prefix: str) -> list[str]:
        """Object names under ``prefix`` (a folder: ``run/out/``), sorted."""

    @abstractmethod
    def delete(self, name: str) -> None: ...


class DirArchive(Archive):
    """A directory the coordinator and every worker share (a volume)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, name: str) -> Path:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"not an archive name: {name!r}")
        return self.root / name

    def put(self, name: str, chunks: Iterable[bytes]) -> int:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        size = 0
        try:
            with os.fdopen(fd, "wb") as fh:
                for c in chunks:
                    fh.write(c)
                    size += len(c)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return size

    def get(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            return None

    def stream(self, name: str, chunk: int = CHUNK) -> Iterator[bytes]:
        with open(self._path(name), "rb") as fh:
            while True:
                data = fh.read(chunk)
                if not data:
                    return
                yield data

    def size(self, name: str) -> int | None:
        try:
            return self._path(name).stat().st_size
        except FileNotFoundError:
            return None

    def names(self, prefix: str) -> list[str]:
        folder = self._path(prefix.rstrip("/"))
        if not folder.is_dir():
            return []
        return sorted(f"{prefix.rstrip('/')}/{p.name}" for p in folder.iterdir()
                      if p.is_file() and not p.name.startswith("."))

    def delete(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)


class _Chunks:
    """A file-like view of an iterator of bytes (boto3's upload_fileobj reads it part by part)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it, self._buf, self.size = iter(chunks), b"", 0

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            try:
                self._buf += next(self._it)
            except StopIteration:
                break
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        self.size += len(out)
        return out


class S3Archive(Archive):
    """An S3-compatible bucket (``s3://bucket/prefix``): objects are written whole (a put, or a multipart
    upload for big ones), so a reader sees an object entirely or not at all."""

    def __init__(self, url: str, endpoint_url: str | None = None) -> None:
        import boto3
        from botocore.config import Config

        rest = url[len("s3://"):]
        self.bucket, _, prefix = rest.partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = url
        self.client = boto3.client("s3", endpoint_url=endpoint_url or os.environ.get(ENDPOINT_ENV) or None,
                                   config=Config(retries={"max_attempts": 8, "mode": "standard"},
                                                 max_pool_connections=64))

    def _key(self, name: str) -> str:
        return self.prefix + name

    def put(self, name: str, chunks: Iterable[bytes]) -> int:
        from boto3.s3.transfer import TransferConfig

        body = _Chunks(chunks)
        self.client.upload_fileobj(body, self.bucket, self._key(name),
                                   Config=TransferConfig(multipart_threshold=16 << 20, multipart_chunksize=16 << 20,
                                                         use_threads=False))
        return body.size

    def get(self, name: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def stream(self, name: str, chunk: int = CHUNK) -> Iterator[bytes]:
        body = self.client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"]
        yield from body.iter_chunks(chunk)

    def size(self, name: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=self._key(name))["ContentLength"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def names(self, prefix: str) -> list[str]:
        out: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix.rstrip("/") + "/")):
            out += [o["Key"][len(self.prefix):] for o in page.get("Contents") or []]
        return sorted(out)

    def delete(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(name))


def archive_errors() -> tuple[type[BaseException], ...]:
    """What a failing archive raises: the file system's errors, and botocore's when it is installed."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return (OSError,)
    return (OSError, BotoCoreError, ClientError)


_OPEN: dict[str, Archive] = {}
_LOCK = threading.Lock()


def archive_for(url: str) -> Archive:
    """One archive client per process and URL: ``s3://bucket/prefix`` or a directory."""
    with _LOCK:
        if url not in _OPEN:
            _OPEN[url] = S3Archive(url) if url.startswith("s3://") else DirArchive(url)
        return _OPEN[url]


def seg_name(seg: int) -> str:
    return f"{seg:07d}.jsonl"


def lines_of(data: bytes | None) -> list[str]:
    return [line for line in data.decode("utf-8").split("\n") if line] if data else []


def joined(lines: Iterable[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


class RunArchive:
    """One run's part of an archive (names relative to ``<run_id>/``)."""

    def __init__(self, archive: Archive, run_id: str) -> None:
        self.archive, self.run_id = archive, run_id

    @classmethod
    def of(cls, url: str, run_id: str) -> "RunArchive":
        return cls(archive_for(url), run_id)

    def _n(self, name: str) -> str:
        return f"{self.run_id}/{name}"

    # -- the plan (the coordinator writes it before dispatching) ----------------------------
    def put_meta(self, meta: dict[str, Any]) -> None:
        self.archive.put(self._n("meta.json"), [json.dumps(meta).encode()])

    def meta(self) -> dict[str, Any] | None:
        raw = self.archive.get(self._n("meta.json"))
        try:
            meta = json.loads(raw) if raw else None
        except ValueError:
            return None
        return meta if isinstance(meta, dict) and meta.get("run_id") == self.run_id else None

    def put_plan(self, seg: int, items: list[str], prompts: list[str]) -> None:
        self.archive.put(self._n(f"plan/{seg_name(seg)}"), [joined(items)])
        if prompts:
            self.archive.put(self._n(f"prompts/{seg_name(seg)}"), [joined(prompts)])

    def plan(self, seg: int) -> list[str]:
        return lines_of(self.archive.get(self._n(f"plan/{seg_name(seg)}")))

    def prompts(self, seg: int) -> list[str]:
        return lines_of(self.archive.get(self._n(f"prompts/{seg_name(seg)}")))

    # -- outcomes (the worker that ran a segment writes them) ----------------------------------
    def put_out(self, seg: int, lines: list[str]) -> None:
        self.archive.put(self._n(f"out/{seg_name(seg)}"), [joined(lines)])

    def out(self, seg: int) -> dict[str, str]:
        """The segment's archived outcomes by item key (an earlier, partial attempt's included)."""
        found: dict[str, str] = {}
        for line in lines_of(self.archive.get(self._n(f"out/{seg_name(seg)}"))):
            try:
                found[json.loads(line)["key"]] = line
            except (ValueError, KeyError, TypeError):
                continue  # an unreadable line is not an outcome: the item runs again
        return found

    def out_segments(self) -> list[int]:
        return [int(n.rsplit("/", 1)[1].split(".")[0]) for n in self.archive.names(self._n("out/"))]

    # -- the report (the aggregate writes it, the coordinator streams it) ---------------------
    def put_section(self, section: str, chunks: Iterable[bytes]) -> int:
        return self.archive.put(self._n(f"report/{section}.part"), chunks)

    def put_index(self, chunks: Iterable[bytes]) -> None:
        self.archive.put(self._n("report/index.part"), chunks)

    def index(self) -> Iterator[bytes]:
        return self.archive.stream(self._n("report/index.part"))

    def has_index(self) -> bool:
        return self.archive.size(self._n("report/index.part")) is not None

    def put_head(self, head: bytes) -> None:
        self.archive.put(self._n("report/head.json"), [head])

    def head(self) -> bytes | None:
        return self.archive.get(self._n("report/head.json"))

    def section_size(self, section: str) -> int:
        return self.archive.size(self._n(f"report/{section}.part")) or 0

    def section(self, section: str) -> Iterator[bytes]:
        return self.archive.stream(self._n(f"report/{section}.part"))
