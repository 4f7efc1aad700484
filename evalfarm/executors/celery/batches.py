"""Provider batches on the farm: submitted and polled by short tasks on the aggregate queue, so no worker
thread waits for a batch (a batch may take 24 hours).

The coordinator sends a ``batch_submit`` task per group of a batched adapter's items (``route_batches``,
called by ``_dispatch``, at most the provider's stated requests per group). The task writes the group's
requests (split again by bytes when needed), finds out whether the group was already submitted (the run
store's record first, then the provider's batch list by ``metadata``: a worker that died between the
provider's answer and the record does not submit twice), submits what was not, records each batch (id,
label, item keys, state) in the run store's hash ``ef:run:<id>:batches`` and schedules a ``batch_poll``.
A ``batch_poll`` asks the provider once and schedules the next poll (backoff, ``EVALFARM_BATCH_POLL_S`` doubling
to ``EVALFARM_BATCH_POLL_MAX_S``) until the batch ends; then it maps the results back by ``custom_id`` (the item
key) and scores them like live answers (checks here, the judge on the judge queue as usual). A failed line
goes live (a ``run_batch`` task on the provider queue); an expired batch's items are submitted once more, then
are ``BatchExpired`` errors; a spent budget, or a cancelled run, cancels the batch at the provider.

A ``batch: true`` judge is batched the same way: its items wait answered in ``pending``; the worker that would
send them to the judge queue sends ``batch_submit`` tasks of adapter ``judge`` (one request per item,
``custom_id`` ``judge-<key>``), and the poll judges each item with ``engine.judge`` over a transport that replays
its batch answer once (the judge's retry, a failed or unanswered line: live calls).

``resume`` dispatches none of the items an unfinished batch holds (``keys_in_open_batches``), and a group it
dispatches again keeps its label (a hash of its keys), so the record or the provider's list finds it.
"""
from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Callable, Iterable, Iterator

from ...core.outcome import Outcome
from ...core.plan import Item
from ...engine.adapters import Completion
from ...engine.budget import SKIPPED_BUDGET
from ...engine.items import bounded, error_of
from ...envvars import env_float, env_int
from ...errors import InfrastructureError
from ...redact import redact
from ...logs import get_logger
from ...providers.batch_wire import BatchState
from ...providers.batches import BatchCancelled, BatchExpired, client_for
from ...providers.errors import ProviderError
from ...providers.openai import cost_of
from ..finalize import run_ttl_s
from ..store import RunStore
from . import work
from .app import BATCH_SUBMIT
from .routing import PROVIDER_MAX, batched_adapters

log = get_logger("evalfarm.batches")

QUEUE = "aggregate"  # short tasks: they share the aggregate pool


def records_key(run_id: str) -> str:
    return f"ef:run:{run_id}:batches"


JUDGE = "judge"  # the adapter name of a batched judge's groups and records


def judge_batched(meta: dict[str, Any] | None) -> bool:
    """Whether the run's judge (from its stored spec) sends its calls through a batch API."""
    judge = ((meta or {}).get("spec") or {}).get("judge")
    return isinstance(judge, dict) and bool(judge.get("batch")) and judge.get("provider", "openai") in PROVIDER_MAX


def judge_groups(store: RunStore, run_id: str, keys: list[str], store_url: str | None) -> list[list[str]] | None:
    """The ``batch_submit`` groups of items to judge when the run's judge is batched, else None (live)."""
    ctx = work.context_for(store, run_id, store_url) if keys else None
    if ctx is None or not judge_batched(ctx.meta):
        return None
    size = group_requests(ctx.spec.judge.provider)
    return [keys[start:start + size] for start in range(0, len(keys), size)]


def _endpoint(ctx: Any, adapter_id: str) -> Any:
    """The endpoint a group's requests go to: an adapter's, or the judge's."""
    if adapter_id == JUDGE:
        from ...providers.batches import judge_endpoint

        return judge_endpoint(ctx.spec.judge)
    return ctx.engine.adapters[adapter_id].endpoint


def group_requests(provider: str) -> int:
    cap = PROVIDER_MAX[provider]
    return min(cap, env_int("EVALFARM_BATCH_MAX_REQUESTS", cap, 1, cap) or cap)


def label_for(adapter: str, keys: list[str], attempt: int = 0) -> str:
    """A group's stable name: the same keys are the same group, whoever dispatches them."""
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
    return f"{adapter}:{digest}" + (f":r{attempt}" if attempt else "")


# -- the records ----------------------------------------------------------------------------------------

def records(store: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's batch records (untrusted: anything not a record is dropped)."""
    out = {}
    for k, v in store.r.hgetall(records_key(run_id)).items():
        try:
            rec = json.loads(v)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            out[k.decode() if isinstance(k, bytes) else str(k)] = rec
    return out


def _put(store: RunStore, run_id: str, field: str, record: dict[str, Any]) -> None:
    pipe = store.r.pipeline()
    pipe.hset(records_key(run_id), field, json.dumps(record))
    pipe.expire(records_key(run_id), run_ttl_s())
    pipe.execute()


def keys_in_open_batches(store: RunStore, run_id: str) -> set[str]:
    """Item keys an unfinished batch holds (submitted or being submitted): not to be dispatched again."""
    out: set[str] = set()
    for field, rec in records(store, run_id).items():
        if not rec.get("processed") and isinstance(rec.get("keys"), list):
            out.update(k for k in rec["keys"] if isinstance(k, str))
    return out


def batch_records(store: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    """The provider batches of a run (not the groups being submitted)."""
    return {f: r for f, r in records(store, run_id).items() if not f.startswith("group:")}


def lines(recs: dict[str, dict[str, Any]]) -> list[str]:
    """One line per batch for ``status``: id, adapter, provider, state, requests, counts."""
    out = []
    for bid, r in sorted(recs.items(), key=lambda kv: kv[1].get("at") or 0):
        counts = r.get("counts") if isinstance(r.get("counts"), dict) else {}
        shown = ", ".join(f"{k} {v}" for k, v in counts.items() if isinstance(v, int)) or "-"
        state = str(r.get("status"))[:20] + (", results taken" if r.get("processed") else "")
        out.append(f"batch {str(bid)[:80]}  {str(r.get('label'))[:40]}  {str(r.get('kind'))[:12]}  {state}  "
                   f"{len(r.get('keys') or [])} requests  ({shown})")
    return out


def open_batches_line(store: RunStore, run_id: str) -> str | None:
    """"N batches open at the provider (state: n, ...; counts)" for a run waiting on them, else None: the
    coordinator says this instead of warning that no worker consumes the provider queue."""
    recs = [r for r in batch_records(store, run_id).values() if not r.get("processed")]
    if not recs:
        return None
    states: dict[str, int] = {}
    counts: dict[str, int] = {}
    for r in recs:
        states[str(r.get("status"))[:20]] = states.get(str(r.get("status"))[:20], 0) + 1
        for k, v in (r.get("counts") if isinstance(r.get("counts"), dict) else {}).items():
            if isinstance(v, int):
                counts[str(k)[:20]] = counts.get(str(k)[:20], 0) + v
    held = sum(len(r.get("keys") or []) for r in recs)
    return (f"{len(recs)} batch{'es' if len(recs) != 1 else ''} open at the provider "
            f"({', '.join(f'{s} {n}' for s, n in sorted(states.items()))}; {held} requests"
            + "".join(f", {k} {v}" for k, v in counts.items()) + "); 'evalfarm status' shows them")


# -- dispatch (the coordinator) --------------------------------------------------------------------------

def route_batches(app, store: RunStore, run_id: str, batches: Iterable[list[str]],
                  delay_s: float = 0.0) -> Iterator[list[str]]:
    """Send the batched adapters' items among ``batches`` as ``batch_submit`` tasks (groups of at most the
    provider's requests); yield the rest for the provider queue. A run without them passes through."""
    adapters = batched_adapters(store.get_meta(run_id))
    if not adapters:
        yield from batches
        return
    groups: dict[str, list[str]] = {a: [] for a in adapters}

    def send(adapter: str) -> None:
        keys, groups[adapter] = groups[adapter], []
        app.send_task(BATCH_SUBMIT, args=[run_id, keys, adapter, 0], queue=QUEUE)
        if delay_s:
            time.sleep(delay_s)

    for keys in batches:
        rest = []
        for key, raw in zip(keys, store.get_items(run_id, keys)):
            adapter = json.loads(raw).get("adapter") if raw is not None else None
            if adapter in groups:
                groups[adapter].append(key)
                if len(groups[adapter]) >= group_requests(adapters[adapter]):
                    send(adapter)
            else:
                rest.append(key)
        if rest:
            yield rest
    for adapter in adapters:
        if groups[adapter]:
            send(adapter)


# -- the tasks (workers) ---------------------------------------------------------------------------------

def poll_delay(attempt: int) -> float:
    base = env_float("EVALFARM_BATCH_POLL_S", 2.0, 0.01, 3600.0)
    return min(env_float("EVALFARM_BATCH_POLL_MAX_S", 60.0, 0.01, 3600.0), base * (2 ** min(attempt, 20)))


def submit(store: RunStore, run_id: str, keys: list[str], adapter_id: str, attempt: int, store_url: str | None,
           schedule_poll: Callable[[str, int, float], None],
           enqueue_live: Callable[[list[str]], None] = lambda keys: None) -> list[str]:
    """The ``batch_submit`` task: submit the group's open items unless already submitted; returns the
    batch ids it polls. A batch the provider refuses (4xx) goes live; one it cannot answer now (5xx, no
    connection) is an infrastructure error: the task runs again."""
    ctx = work.context_for(store, run_id, store_url)
    if ctx is None or work._cancelled(store, run_id):
        return []
    label = label_for(adapter_id, keys, attempt)
    mine = {f: r for f, r in records(store, run_id).items() if r.get("group") == label and not f.startswith("group:")}
    if mine:  # the record says it was submitted: poll it (a redelivered task, or a resume)
        for bid in mine:
            if not mine[bid].get("processed"):
                schedule_poll(bid, 0, poll_delay(0))
        return list(mine)
    if adapter_id == JUDGE:
        todo, bodies = _judge_requests(store, run_id, keys, label, ctx)
    else:
        settled = store.done_keys(run_id, keys) | store.pending_among(run_id, keys)
        todo = [k for k in keys if k not in settled]
        items = {i.key: i for i in (Item.from_dict(json.loads(raw)) for raw in store.get_items(run_id, todo) if raw)}
        adapter = ctx.engine.adapters[adapter_id]
        bodies = {k: (k, _body(adapter, items[k])) for k in todo if k in items}
    if not todo:
        return []
    _put(store, run_id, f"group:{label}", {"group": label, "adapter": adapter_id, "keys": todo, "processed": False,
                                            "at": time.time()})
    client = client_for(_endpoint(ctx, adapter_id))
    lines = [(k, client.line(*bodies[k])) for k in todo if k in bodies]  # (item key, its request line)
    from ...engine.batching import split

    ids: list[str] = []

    async def go() -> None:
        try:
            known = {(s.metadata or {}).get("evalfarm_batch"): s for s in await _listed(client, run_id)}
            for part, group in enumerate(split(lines, client.limits.max_requests, client.limits.max_bytes)):
                name = f"{label}:{part}"
                state = known.get(name)
                if state is None:
                    state = await client.submit([ln for _, ln in group], {"evalfarm_run": run_id,
                                                                          "evalfarm_batch": name})
                else:
                    log.info("batch_reconciled", run_id=run_id, batch=state.id, group=name)
                _put(store, run_id, state.id, {"id": state.id, "group": label, "part": name, "label": adapter_id,
                                               "adapter": adapter_id, "kind": client.kind, "status": state.status,
                                               "counts": state.counts, "keys": [k for k, _ in group],
                                               "attempt": attempt, "processed": False, "at": time.time()})
                ids.append(state.id)
        finally:
            await client.aclose()

    refused: list[str] = []
    try:
        work.WORKER_LOOP.run(go)
    except ProviderError as exc:
        if exc.transient:
            raise InfrastructureError(f"batch API of {adapter_id}: {redact(str(exc))[:200]}") from None
        log.warning("batch_refused", run_id=run_id, group=label, error=redact(str(exc))[:200])
        submitted = {k for rec in batch_records(store, run_id).values() if rec.get("group") == label
                     for k in rec.get("keys") or []}
        refused = [k for k, _ in lines if k not in submitted]
    _put(store, run_id, f"group:{label}", {"group": label, "keys": [], "processed": True, "at": time.time()})
    if refused:
        enqueue_live(refused)
    for bid in ids:
        schedule_poll(bid, 0, poll_delay(0))
    return ids


def _judge_requests(store: RunStore, run_id: str, keys: list[str], label: str,
                    ctx: Any) -> tuple[list[str], dict[str, tuple[str, bytes]]]:
    """A judge group's open items (answered, waiting in ``pending``, in no other judge batch) and each one's
    request: (custom_id ``judge_id(key)``, the body the judge would send live; ``judging_messages``)."""
    from ...engine.batching import judge_id
    from ...engine.judges import judging_messages

    done = store.done_keys(run_id, keys)
    held = {k for f, r in records(store, run_id).items()
            if r.get("adapter") == JUDGE and r.get("group") != label and not r.get("processed")
            for k in r.get("keys") or [] if isinstance(k, str)}
    partial = {o["key"]: Outcome.from_dict(o) for o in store.get_pending(run_id, [k for k in keys if k not in done])
               if isinstance(o, dict) and o.get("key") not in held}
    todo = [k for k in keys if k in partial]
    endpoint = _endpoint(ctx, JUDGE)
    bodies = {}
    for key, raw in zip(todo, store.get_items(run_id, todo)):
        if raw:
            item = Item.from_dict(json.loads(raw))
            messages = judging_messages(ctx.spec.judge, item.prompt, partial[key].output or "")
            bodies[key] = (judge_id(key), endpoint.wire.body(endpoint, messages, dict(endpoint.params)))
    return [k for k in todo if k in bodies], bodies


async def _listed(client: Any, run_id: str) -> list[BatchState]:
    """The provider's batches of this run (by metadata); an API without metadata (Anthropic) finds none."""
    if client.kind != "openai":
        return []
    return [s for s in await client.list(limit=1000) if (s.metadata or {}).get("evalfarm_run") == run_id]


def _body(adapter: Any, item: Item) -> bytes:
    ep = adapter.endpoint
    messages = ([{"role": "system", "content": item.prompt.system}] if item.prompt.system else []) + \
               [{"role": "user", "content": item.prompt.text}]
    return ep.wire.body(ep, messages, dict(ep.params))


def poll(store: RunStore, run_id: str, batch_id: str, attempt: int, store_url: str | None,
         schedule_poll: Callable[[str, int, float], None], enqueue_live: Callable[[list[str]], None],
         resubmit: Callable[[list[str], str, int], None], enqueue_judge: Callable[[str, list[str]], None],
         enqueue_aggregate: Callable[[str], None]) -> str:
    """The ``batch_poll`` task: ask the provider once; an ended batch's results become outcomes."""
    rec = records(store, run_id).get(batch_id)
    ctx = work.context_for(store, run_id, store_url)
    if rec is None or rec.get("processed") or ctx is None:
        return "gone"
    endpoint = _endpoint(ctx, rec["adapter"])
    client = client_for(endpoint)
    cancelled_run = work._cancelled(store, run_id)
    engine = ctx.engine

    async def go() -> tuple[BatchState, dict | None, bool]:
        try:
            state = await client.get(batch_id)
            by_budget = bool(rec.get("budget_cancelled"))
            if not state.ended and not rec.get("cancel_sent"):
                over = engine.budget is not None and await engine.budget.exhausted()
                if over or cancelled_run:
                    state = await client.cancel(batch_id)
                    rec["cancel_sent"], rec["budget_cancelled"] = True, over
                    by_budget = over
            results = await client.results(state) if state.ended and state.status != "failed" else None
            return state, results, by_budget
        finally:
            await client.aclose()

    t0 = time.monotonic()
    try:
        state, results, by_budget = work.WORKER_LOOP.run(go)
    except ProviderError as exc:
        if exc.transient:  # the provider will answer later: this poll runs again
            raise InfrastructureError(f"batch API of {rec['adapter']}: {redact(str(exc))[:200]}") from None
        # the provider does not know the batch (404) or refuses to say (4xx): its items go live
        log.warning("batch_lost", run_id=run_id, batch=batch_id, error=redact(str(exc))[:200])
        rec.update(status="lost", processed=True)
        _put(store, run_id, batch_id, rec)
        keys = [k for k in rec.get("keys") or [] if isinstance(k, str)]
        settled = store.done_keys(run_id, keys) | store.pending_among(run_id, keys)
        enqueue_live([k for k in keys if k not in settled])
        return "lost"
    t_http = time.monotonic() - t0
    rec.update(status=state.status, counts=state.counts)
    if not state.ended:
        _put(store, run_id, batch_id, rec)
        schedule_poll(batch_id, attempt + 1, poll_delay(attempt + 1))
        return state.status
    keys = [k for k in rec.get("keys") or [] if isinstance(k, str)]
    if rec["adapter"] == JUDGE:
        n = _judge_answers(store, ctx, run_id, keys, endpoint, results or {}, cancelled_run, enqueue_aggregate)
        rec["processed"] = True
        _put(store, run_id, batch_id, rec)
        log.info("batch_results_taken", run_id=run_id, batch=batch_id, status=state.status, items=n,
                 provider_s=round(t_http, 3))
        return state.status
    adapter = ctx.engine.adapters[rec["adapter"]]
    settled = store.done_keys(run_id, keys) | store.pending_among(run_id, keys)  # a redelivered poll: once
    open_keys = [k for k in keys if k not in settled]
    items = {i.key: i for i in (Item.from_dict(json.loads(raw)) for raw in store.get_items(run_id, open_keys) if raw)}
    price = adapter.endpoint.price.batched() if adapter.endpoint.price is not None else None
    final: list[Outcome] = []
    judge: list[Outcome] = []
    live: list[str] = []
    again: list[str] = []
    charged = 0.0
    # a batched answer's latency is its batch's time at the provider, submit to results, as in process
    # (enqueue to answer); the record is Redis data, so a bad "at" gives the smallest latency, not an error
    try:
        waited_ms = max(0.001, (time.time() - float(rec.get("at") or time.time())) * 1e3)
    except (TypeError, ValueError):
        waited_ms = 0.001
    for key, item in items.items():
        got = (results or {}).get(key)
        out = Outcome(key=key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
        if got is not None and got.kind == "ok":
            try:
                text, finish, t_in, t_out = adapter.endpoint.wire.parse(adapter.endpoint, got.body)
            except Exception:  # a malformed answer line: the live call decides
                live.append(key)
                continue
            completion = Completion(text=text, finish_reason=finish, input_tokens=t_in, output_tokens=t_out,
                                    cost_usd=cost_of(price, t_in, t_out),
                                    meta={"attempts": 1, "priced": adapter.endpoint.price is not None,
                                          "batch": "answered", "call_ms": round(waited_ms, 3)})
            charged += completion.cost_usd
            out = engine.score(item, out, completion, time.perf_counter())
            (judge if engine.needs_judge(out) else final).append(out)
        elif got is not None and got.kind == "error" or state.status == "failed":
            live.append(key)
        elif by_budget or (cancelled_run and state.status in ("cancelled", "canceled")):
            out.skipped = SKIPPED_BUDGET if by_budget else None
            if by_budget:
                final.append(out)
        elif (got is not None and got.kind == "expired") or state.status == "expired":
            if int(rec.get("attempt") or 0) < 1:
                again.append(key)
            else:
                out.error = error_of(BatchExpired(f"batch {batch_id} expired (after one resubmission)"), "adapter")
                final.append(out)
        else:
            out.error = error_of(BatchCancelled(f"batch {batch_id} ended ({state.status}) without answering it"),
                                 "adapter")
            final.append(out)
    if charged and engine.budget is not None:
        work.WORKER_LOOP.run(lambda: engine.budget.charge(charged))
    if judge:
        store.put_pending(run_id, [o.to_dict() for o in judge])
        enqueue_judge(run_id, [o.key for o in judge])
    rec["processed"] = True
    _put(store, run_id, batch_id, rec)
    if live:
        enqueue_live(live)
    if again:
        resubmit(again, rec["adapter"], int(rec.get("attempt") or 0) + 1)
    work._record(store, ctx, run_id, [engine.decide(o) for o in final], enqueue_aggregate)
    log.info("batch_results_taken", run_id=run_id, batch=batch_id, status=state.status, items=len(items),
             live=len(live), resubmitted=len(again), provider_s=round(t_http, 3),
             scored_s=round(time.monotonic() - t0 - t_http, 3))
    return state.status


def _judge_answers(store: RunStore, ctx: Any, run_id: str, keys: list[str], endpoint: Any, results: dict,
                   cancelled_run: bool, enqueue_aggregate: Callable[[str], None]) -> int:
    """A judge batch's answers judged as the live judge would: ``engine.judge`` over a transport that
    replays the item's answer from the batch once; a second call (an unparseable verdict's retry), a
    failed line, or an item the batch did not answer (expired, cancelled) is a live call. Returns how many
    items were recorded."""
    import copy

    from ...engine.batching import CURRENT_KEY, judge_id
    from ...engine.judges import LLMJudge
    from ...providers.openai import ChatResult, chat

    if cancelled_run:
        return 0
    done = store.done_keys(run_id, keys)
    partial = {o["key"]: Outcome.from_dict(o) for o in store.get_pending(run_id, [k for k in keys if k not in done])
               if isinstance(o, dict)}
    raws = store.get_items(run_id, list(partial))
    pairs = [(Item.from_dict(json.loads(raw)), partial[k]) for k, raw in zip(partial, raws) if raw]
    price = endpoint.price.batched() if endpoint.price is not None else None
    replayed: set[str] = set()

    async def replay(messages: list[dict[str, str]]) -> Any:
        key = CURRENT_KEY.get() or ""
        got = results.get(judge_id(key))
        if key not in replayed and got is not None and got.kind == "ok":
            replayed.add(key)
            try:
                text, finish, t_in, t_out = endpoint.wire.parse(endpoint, got.body)
                return ChatResult(text, finish, t_in, t_out, cost_of(price, t_in, t_out), 1)
            except Exception:  # a malformed answer line: the live call decides
                pass
        replayed.add(key)
        return await chat(endpoint, messages, label="judge")

    engine = copy.copy(ctx.engine)  # the process's engine is shared by task threads: its judge stays live
    engine.judge_ = LLMJudge(ctx.spec.judge, replay, kind=endpoint.wire.kind)
    judged = work.WORKER_LOOP.run(lambda: bounded(8, [lambda i=i, o=o: engine.judge(i, o) for i, o in pairs]))
    work._record(store, ctx, run_id, judged, enqueue_aggregate)
    return len(judged)


def cancel_open(store: RunStore, run_id: str) -> list[str]:
    """``evalfarm cancel``: cancel the run's open batches at the provider now (best effort: a worker's next
    poll of a cancelled run cancels them too). Returns the ids cancelled."""
    from ...engine import build_engine
    from ...providers.batches import judge_endpoint
    from ..finalize import spec_of

    meta = store.get_meta(run_id)
    open_ = {b: r for b, r in records(store, run_id).items()
             if not b.startswith("group:") and not r.get("processed") and not r.get("cancel_sent")}
    if not open_ or meta is None:
        return []
    engine = build_engine(spec_of(meta))
    done: list[str] = []

    async def go() -> None:
        for bid, rec in open_.items():
            client = client_for(judge_endpoint(spec_of(meta).judge) if rec.get("adapter") == JUDGE
                                else engine.adapters[rec["adapter"]].endpoint)
            try:
                await client.cancel(bid)
                done.append(bid)
                rec["cancel_sent"] = True
                _put(store, run_id, bid, rec)
            except Exception as exc:
                log.warning("batch_cancel_failed", run_id=run_id, batch=bid, error=str(exc)[:200])
            finally:
                await client.aclose()

    import asyncio

    asyncio.run(go())
    return done
