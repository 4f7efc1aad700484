"""Farm settings from the environment (documented in the README)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from ...envvars import env_int
from ...errors import UsageError
from ...redact import redact


@dataclass(frozen=True)
class FarmSettings:
    broker_url: str  # redis://... (the embedded default is the in-process backend, not a setting)
    result_backend: str | None = None  # optional; evalfarm never waits on Celery results
    store_url: str | None = None  # the run store; defaults to the broker when it is Redis
    batch_size: int | None = None  # items per task; None picks by run size
    max_in_flight: int = 64  # calls in flight per worker process
    visibility_timeout: int = 900  # seconds before an unacked task is redelivered
    visibility_explicit: bool = False  # set from the environment: overrides the pool's
    time_limit_s: float | None = None  # a batch's items must finish within this (the pool's soft limit)
    idle_warning_s: float = 30.0  # warn when nothing has finished after this long (no worker?)
    stall_notice_s: float = 20.0  # say why when a run has not moved for this long (full Redis, lost items)
    connect_timeout_s: float = 10.0  # an unreachable broker fails within this (EVALFARM_CONNECT_TIMEOUT)
    archive: str | None = None  # EVALFARM_ARCHIVE: a shared directory or s3://bucket/prefix (executors/archive.py)
    blob_dir: str | None = None  # a worker's directory for agents' patches and logs (the worker command sets it)

    @property
    def effective_store_url(self) -> str | None:
        if self.store_url:
            return self.store_url
        if self.broker_url.startswith(("redis://", "rediss://", "unix://")):
            return self.broker_url
        return None

    @property
    def run_store_url(self) -> str:
        url = self.effective_store_url
        if url is None:
            raise UsageError("the run store needs Redis: with a non-Redis broker set EVALFARM_STORE_URL=redis://...")
        return url

    @classmethod
    def from_env(cls, broker_url: str | None = None, **overrides) -> "FarmSettings":
        """Read EVALFARM_* settings; a bad value is one clear error naming the variable."""
        env = os.environ
        broker_url = broker_url or env.get("EVALFARM_BROKER_URL") or None
        if not broker_url:
            raise UsageError("the farm needs a broker: pass --broker redis://HOST:6379/0 or set EVALFARM_BROKER_URL")
        check_broker_url(broker_url, env.get("EVALFARM_STORE_URL"))
        values = dict(
            broker_url=check_redis_url(broker_url, "--broker"),
            result_backend=env.get("EVALFARM_RESULT_BACKEND") or None,
            store_url=check_redis_url(env.get("EVALFARM_STORE_URL") or None, "EVALFARM_STORE_URL"),
            batch_size=env_int("EVALFARM_BATCH_SIZE", None, 1, 10000),
            max_in_flight=env_int("EVALFARM_MAX_IN_FLIGHT", 64, 1, 100000),
            visibility_timeout=env_int("EVALFARM_VISIBILITY_TIMEOUT", 900, 1, 7 * 86400),
            visibility_explicit="EVALFARM_VISIBILITY_TIMEOUT" in env,
            stall_notice_s=env_int("EVALFARM_STALL_NOTICE_S", 20, 1, 86400),
            idle_warning_s=float(env_int("EVALFARM_IDLE_WARNING_S", 30, 1, 86400)),
            connect_timeout_s=float(env_int("EVALFARM_CONNECT_TIMEOUT", 10, 1, 3600)),
            archive=check_archive(env.get("EVALFARM_ARCHIVE") or None),
        )
        values.update(overrides)
        return cls(**values)


REDIS_SCHEMES = ("redis", "rediss", "unix")


def check_archive(url: str | None) -> str | None:
    """EVALFARM_ARCHIVE: ``s3://bucket[/prefix]`` or a directory (made absolute: every worker reads the
    path the coordinator wrote into the run's meta, so it must name the same shared volume)."""
    if not url:
        return None
    if url.startswith("s3://"):
        if not url[len("s3://"):].split("/", 1)[0]:
            raise UsageError(f"EVALFARM_ARCHIVE {url}: no bucket; use s3://BUCKET/PREFIX")
        return url.rstrip("/")
    if "://" in url:
        raise UsageError(f"EVALFARM_ARCHIVE {redact(url)}: not a directory or s3://BUCKET/PREFIX")
    return os.path.abspath(url)


def _transport_aliases():
    from kombu.transport import TRANSPORT_ALIASES  # kombu only for a broker that is not Redis

    return TRANSPORT_ALIASES


def check_broker_url(url: str, store_url: str | None) -> None:
    """A broker URL names a Celery transport, and the run store is Redis: one line naming the URL
    otherwise (``--broker http://...`` is about the broker, not about EVALFARM_STORE_URL)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    base = scheme.split("+", 1)[0]
    if base not in REDIS_SCHEMES and base not in _transport_aliases():
        shown = f"{scheme}://" if scheme else "a URL without a scheme"
        raise UsageError(f"--broker {redact(url)}: not a broker URL ({shown} is not a Celery transport); "
                         "the farm runs on Redis: --broker redis://HOST:6379/0 (rediss:// for TLS)")
    if base not in REDIS_SCHEMES and not store_url:
        raise UsageError(f"--broker {redact(url)}: a broker on {scheme}:// needs a Redis run store beside it: "
                         "set EVALFARM_STORE_URL=redis://HOST:6379/0 (or use a redis:// broker)")


def check_redis_url(url: str | None, source: str) -> str | None:
    """redis://[:password@]host[:port][/db]: the db must be a number (kombu would quietly use 0)."""
    if not url or not url.startswith(("redis://", "rediss://")):
        return url
    parts = urlsplit(url)
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise UsageError(f"{source} {redact(url)}: the database must be a number (redis://host:6379/0)")
    try:
        parts.port
    except ValueError:
        raise UsageError(f"{source} {redact(url)}: the port is not a number") from None
    return url


def pick_batch_size(total: int, configured: int | None) -> int:
    """Big enough to amortise a task round trip (~2.7 ms here), small enough to spread work:
    aim for >= 16 tasks, never more than 100 items in one."""
    if configured:
        return max(1, configured)
    return max(1, min(100, -(-total // 16)))
