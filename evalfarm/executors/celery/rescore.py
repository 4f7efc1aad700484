"""Re-scoring on the farm: the judge backlog ``start_rescore`` left goes to the judge queue.

Only judge batches are sent (the items' stage 1 was replayed by the coordinator), so judge
workers scale and are rate-limited as in any run, and no provider worker ever sees the run.
The last judge batch to record claims the aggregate, as in any run; with nothing to judge
the coordinator claims it.
"""
from __future__ import annotations

from ..store import batched
from .app import JUDGE_BATCH
from .coordinator import CeleryBackend
from .settings import pick_batch_size


def judge_on_farm(backend: CeleryBackend, run_id: str, total: int) -> int:
    """Dispatch the run's judge backlog in batches; returns how many items were sent to be judged."""
    keys = backend.store.pending_keys(run_id)
    size = pick_batch_size(total, backend.settings.batch_size)
    with backend.app.producer_or_acquire() as producer:
        for chunk in batched(keys, size):
            backend.app.send_task(JUDGE_BATCH, args=[run_id, chunk], producer=producer, queue="judge")
    if not keys:
        backend.kick_aggregate(run_id)
    return len(keys)
