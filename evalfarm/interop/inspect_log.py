"""A stored run as an Inspect AI eval log (the JSON log format, schema version 2).

An Inspect log holds one task run against one model, so each evalfarm adapter becomes one log.
Per item (sample): the input, the messages, the output, the model usage of the model under
test and of the judge, and three scores: ``checks`` (the deterministic checks, C/I),
``judge`` (the judge's score, 0-1, when there is a judge) and ``verdict`` (the item's verdict,
C/I). The field order of the top level follows Inspect's reader, which streams the header.
Written from Inspect's log schema (inspect_ai/log/_log.py); evalfarm does not import Inspect.
"""
from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any, Iterator

LOG_VERSION = 2
_STOP = {"stop": "stop", "length": "max_tokens", "content_filter": "content_filter", "tool_calls": "tool_calls"}
_GENERATE_PARAMS = ("temperature", "max_tokens", "top_p", "seed")


def _created(report: dict[str, Any]) -> str:
    for key in ("started_at", "finished_at"):
        value = report.get(key)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value).astimezone(timezone.utc).isoformat()
            except ValueError:
                pass
    match = re.match(r"(\d{8}T\d{6})(\d{6})?Z", report["run_id"])
    if match:
        stamp = datetime.strptime(match.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
        return stamp.isoformat()
    return datetime.now(timezone.utc).isoformat()


# Inspect's `inspect log list` and viewer list only .json logs whose names match this (inspect_ai
# log/_file.py: log_file_pattern); any other name is invisible to them, whatever the content.
INSPECT_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}.*\.json$")


def _component(text: str) -> str:
    """A file-name part as Inspect cleans one (``_ / : +`` become ``-``), and safe on any filesystem."""
    text = re.sub(r"[_/:+]", "-", text)
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip(".-")[:80] or "x"


def file_name(log: dict[str, Any]) -> str:
    """The name Inspect gives a log, ``{created}_{task}_{model}_{id}.json`` (its eval_log_name with the
    pattern ``{task}_{model}_{id}``): ``2026-12-01T18-29-21-00-00_smoke_small_3f9c....json``. The model
    part is the adapter id; the id, unique per run and adapter; our run id stays inside the log
    (``eval.run_id`` and ``eval.metadata.evalfarm.run_id``)."""
    ev = log["eval"]
    created = datetime.fromisoformat(ev["created"]).astimezone(timezone.utc).replace(microsecond=0)
    stamp = created.isoformat().replace(":", "-").replace("+", "-")  # 2026-12-01T18-29-21-00-00
    adapter = ev["metadata"]["evalfarm"]["adapter"]
    return f"{stamp}_{_component(ev['task'])}_{_component(adapter)}_{ev['eval_id']}.json"


def _usage(tokens_in: int, tokens_out: int, cost: float | None) -> dict[str, Any]:
    usage: dict[str, Any] = {"input_tokens": tokens_in, "output_tokens": tokens_out,
                             "total_tokens": tokens_in + tokens_out}
    if cost:
        usage["total_cost"] = cost
    return usage


def _add(totals: dict[str, dict[str, Any]], model: str, usage: dict[str, Any]) -> None:
    acc = totals.setdefault(model, {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        acc[key] += usage[key]
    if usage.get("total_cost"):
        acc["total_cost"] = round(acc.get("total_cost", 0.0) + usage["total_cost"], 10)


def _cv(passed: bool | None) -> str:
    return "C" if passed else "I"


def status_of(report: dict[str, Any]) -> tuple[str, str | None]:
    """Inspect's status and, for an error, its message."""
    stopped = report.get("stopped")
    if isinstance(stopped, str) and stopped:
        return "cancelled", None
    if report.get("nothing_measured"):
        return "error", "nothing was measured: every item errored (see the samples' errors)"
    return "success", None


class SampleIds:
    """Each adapter's sample ids (its outcomes' prompt ids, each once, in first-seen order: a log's
    ``dataset.sample_ids``) kept in a temporary SQLite file, not in memory: a million-item run has a
    million of them. A prompt's trials come one after another in plan order: only a new id is stored."""

    def __init__(self) -> None:
        import sqlite3
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="evalfarm-inspect-")
        self._db = sqlite3.connect(f"{self._dir.name}/ids.db")
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("CREATE TABLE ids (adapter TEXT NOT NULL, id TEXT NOT NULL, UNIQUE (adapter, id))")
        self._last: dict[str, str] = {}
        self._batch: list[tuple[str, str]] = []

    def add(self, adapter: str, prompt_id: str) -> None:
        if self._last.get(adapter) == prompt_id:
            return
        self._last[adapter] = prompt_id
        self._batch.append((adapter, prompt_id))
        if len(self._batch) >= 5000:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany("INSERT OR IGNORE INTO ids (adapter, id) VALUES (?, ?)", self._batch)
        self._batch.clear()

    def count(self, adapter: str) -> int:
        self._flush()
        return self._db.execute("SELECT COUNT(*) FROM ids WHERE adapter = ?", (adapter,)).fetchone()[0]

    def of(self, adapter: str) -> Iterator[str]:
        self._flush()
        for (prompt_id,) in self._db.execute("SELECT id FROM ids WHERE adapter = ? ORDER BY rowid", (adapter,)):
            yield prompt_id

    def close(self) -> None:
        self._db.close()
        self._dir.cleanup()


_IDS, _SAMPLES = "\x00evalfarm:sample_ids\x00", "\x00evalfarm:samples\x00"  # where the streamed parts go


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=1)


class LogWriter:
    """One adapter's Inspect log, written as a report streams by (``add``, an outcome at a time): each
    sample JSON-encoded into ``spool`` (a binary temporary file) as it comes; what the log's head holds
    before its samples (the results, the model usage, the sample ids) is known once every outcome was
    seen (``head``). ``chunks`` are then the log's bytes: the same as ``json.dumps(log, indent=1)`` of
    the whole log built in memory.

    ``inputs``: whether the samples' inputs are known (from the spec, or the report's prompts section):
    ``add`` gets each outcome's input, {"text", "system", "target"}, or None; ``adapter_spec``: the
    adapter's spec entry (model, provider, params); an outcome's stored ``trajectory`` becomes its
    sample's ``events`` (inspect_events.py)."""

    def __init__(self, report: dict[str, Any], adapter: str, spool: Any, ids: SampleIds, inputs: bool = False,
                 adapter_spec: dict[str, Any] | None = None, evalfarm_version: str = "") -> None:
        self.report, self.adapter, self.spool, self.ids = report, adapter, spool, ids
        self.inputs, self.adapter_spec, self.evalfarm_version = inputs, adapter_spec, evalfarm_version
        self.model = f"{adapter_spec.get('provider', 'openai')}/{adapter_spec['model']}" if adapter_spec else adapter
        judge = report.get("judge") if isinstance(report.get("judge"), dict) else None
        self.judge = judge
        self.judge_model = f"{judge.get('provider', 'openai')}/{judge.get('model')}" if judge else None
        self.created = _created(report)
        self.totals: dict[str, dict[str, Any]] = {}
        self.samples = self.measured = self.golden = self.passed = self.judged = 0
        self.judge_sum: float = 0

    def add(self, o: dict[str, Any], prompt: dict[str, Any] | None,
            trajectory: dict[str, Any] | None = None) -> None:
        sample = _sample(o, self.model, self.judge_model, prompt, self.totals)
        if trajectory is not None:
            from .inspect_events import events

            sample["events"] = events(trajectory, self.model, self.created)
            agent = o.get("agent") if isinstance(o.get("agent"), dict) else {}
            sample["metadata"]["trajectory"] = {"sha256": agent.get("trajectory_sha256"),
                                                "sources": trajectory.get("sources"),
                                                "mismatch": agent.get("trajectory_mismatch")}
        text = "  " + _dumps(sample).replace("\n", "\n  ")
        self.spool.write(((",\n" if self.samples else "") + text).encode("utf-8"))
        self.samples += 1
        self.ids.add(self.adapter, o["prompt_id"])
        if not o.get("error"):  # the results' figures, over the measured samples (``_results``)
            self.measured += 1
            self.golden += 1 if o.get("golden_passed") else 0
            self.passed += 1 if o.get("passed") else 0
            if isinstance(o.get("judge_score"), (int, float)):
                self.judge_sum += o["judge_score"]
                self.judged += 1

    def head(self) -> dict[str, Any]:
        """The log without its samples (its ``dataset.sample_ids`` a count only): for ``file_name``."""
        return self._log(self.ids.count(self.adapter), [])

    def _log(self, n_ids: int, sample_ids: list[str]) -> dict[str, Any]:
        report, adapter, adapter_spec = self.report, self.adapter, self.adapter_spec
        figures = (report.get("per_adapter") or {}).get(adapter) or {}
        run_id = report["run_id"]
        created = self.created
        status, error = status_of(report)
        params = (adapter_spec or {}).get("params") or {}
        generate = {k: params[k] for k in _GENERATE_PARAMS
                    if isinstance(params.get(k), (int, float)) and not isinstance(params.get(k), bool)}
        log: dict[str, Any] = {
            "version": LOG_VERSION,
            "status": status,
            "eval": {
                "eval_id": hashlib.sha256(f"{run_id}\0{adapter}".encode()).hexdigest()[:22],
                "run_id": run_id,
                "created": created,
                "task": report.get("spec_name") or "evalfarm",
                "task_id": hashlib.sha256(str(report.get("spec_hash", "")).encode()).hexdigest()[:22],
                "task_version": 0,
                "task_attribs": {}, "task_args": {}, "task_args_passed": {},
                "solver": "evalfarm",
                "dataset": {"name": report.get("spec_name"), "samples": n_ids, "sample_ids": sample_ids},
                "model": self.model,
                "model_generate_config": generate,
                "model_base_url": (adapter_spec or {}).get("base_url"),
                "model_args": {},
                "config": {"epochs": int(report.get("trials") or 1)},
                "packages": {"evalfarm": self.evalfarm_version} if self.evalfarm_version else {},
                "metadata": {"evalfarm": {
                    "run_id": run_id, "adapter": adapter, "spec_hash": report.get("spec_hash"),
                    "lineage_tag": report.get("lineage_tag"), "mode": report.get("mode"),
                    "thresholds_passed": report.get("thresholds_passed"),
                    "threshold_failures": report.get("threshold_failures"), "overall": figures.get("overall"),
                    "inputs_from_spec": self.inputs}},
                "scorers": [{"name": "checks"}, {"name": "verdict"}] + ([{"name": "judge"}] if self.judge else []),
            },
            "plan": {"name": "plan", "steps": [{"solver": "evalfarm/generate", "params": {}}], "config": generate},
            "results": self._results(figures),
            "stats": {"started_at": created, "completed_at": _completed(report, created), "model_usage": self.totals},
        }
        if error:
            log["error"] = {"message": error, "traceback": "", "traceback_ansi": ""}
        log["samples"] = [_SAMPLES] if self.samples else []
        return log

    def chunks(self) -> Iterator[bytes]:
        """The log's bytes (after the last ``add``): its head, the sample ids, the spooled samples."""
        n_ids = self.ids.count(self.adapter)
        text = _dumps(self._log(n_ids, [_IDS] if n_ids else [])) + "\n"
        ids_marker, samples_marker = _dumps(_IDS), _dumps(_SAMPLES)
        # the ids' marker is the first (only labels and hashes come before it), the samples' the last
        ids_at = text.index(ids_marker) if n_ids else -1
        samples_at = text.rindex(samples_marker) if self.samples else len(text)
        start = 0
        if n_ids:
            line = text.rindex("\n", 0, ids_at) + 1
            indent = text[line:ids_at]
            yield text[:line].encode("utf-8")
            batch: list[str] = []
            for i, prompt_id in enumerate(self.ids.of(self.adapter)):
                batch.append(("" if i == 0 else ",\n") + indent + json.dumps(prompt_id, ensure_ascii=False))
                if len(batch) >= 5000:
                    yield "".join(batch).encode("utf-8")
                    batch = []
            yield "".join(batch).encode("utf-8")
            start = ids_at + len(ids_marker)
        if self.samples:
            line = text.rindex("\n", 0, samples_at) + 1
            yield text[start:line].encode("utf-8")
            self.spool.flush()
            self.spool.seek(0)
            while chunk := self.spool.read(1 << 20):
                yield chunk
            start = samples_at + len(samples_marker)
        yield text[start:].encode("utf-8")

    def _results(self, figures: dict[str, Any]) -> dict[str, Any]:
        n_scored, n_unscored = self.measured, self.samples - self.measured

        def score(name: str, metrics: dict[str, Any]) -> dict[str, Any]:
            kept = {k: {"name": k, "value": v} for k, v in metrics.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)}
            return {"name": name, "scorer": name, "scored_samples": n_scored, "unscored_samples": n_unscored,
                    "params": {}, "metrics": kept}

        def rate(count: int) -> float | None:
            return count / self.measured if self.measured else None

        checks = score("checks", {"accuracy": rate(self.golden)})
        verdict_metrics = {"accuracy": rate(self.passed)}
        pass_k = figures.get("pass_k") if isinstance(figures.get("pass_k"), dict) else None
        if pass_k and isinstance(pass_k.get("rate"), (int, float)):
            verdict_metrics[f"pass^{pass_k.get('k')}"] = pass_k["rate"]
        scores = [checks, score("verdict", verdict_metrics)]
        if self.judge is not None:
            scores.append(score("judge", {"mean": self.judge_sum / self.judged if self.judged else None}))
        return {"total_samples": self.samples, "completed_samples": n_scored, "scores": scores}


def _completed(report: dict[str, Any], created: str) -> str:
    value = report.get("finished_at")
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).astimezone(timezone.utc).isoformat()
        except ValueError:
            pass
    return created


def judge_explanation(o: dict[str, Any]) -> str | None:
    """The judge's reason; for a weighted rubric, one line per criterion (id, verdict, score, reason),
    which the viewer shows under the judge's score."""
    if o.get("judge_reason"):
        return o["judge_reason"]
    lines = []
    for c in o.get("judge_criteria") or []:
        if isinstance(c, dict):
            score = f" {c['score']:g}" if isinstance(c.get("score"), (int, float)) else ""
            lines.append(f"{c.get('id')}: {c.get('verdict', '?')}{score} (weight {c.get('weight', 1)}): "
                         f"{c.get('reason') or 'no reason given'}")
    return "\n".join(lines) or None


def _sample(o: dict[str, Any], model: str, judge_model: str | None, prompt: dict[str, Any] | None,
            totals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if prompt is None:
        text, system, target = f"(prompt {o['prompt_id']}: its text is not stored in the evalfarm report; " \
                               "export with --spec SPEC to include it)", None, ""
    else:
        text, system, target = prompt["text"], prompt.get("system"), prompt.get("target") or ""
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system, "source": "input"})
    messages.append({"role": "user", "content": text, "source": "input"})
    usage = _usage(o.get("input_tokens") or 0, o.get("output_tokens") or 0, o.get("cost_usd"))
    model_usage = {model: usage}
    _add(totals, model, usage)
    if judge_model and (o.get("judge_input_tokens") or o.get("judge_output_tokens")):
        judge_usage = _usage(o.get("judge_input_tokens") or 0, o.get("judge_output_tokens") or 0,
                             o.get("judge_cost_usd"))
        model_usage[judge_model] = judge_usage if judge_model != model else {
            k: usage.get(k, 0) + judge_usage.get(k, 0) for k in set(usage) | set(judge_usage)}
        _add(totals, judge_model, judge_usage)
    seconds = round(o["latency_ms"] / 1000.0, 6) if isinstance(o.get("latency_ms"), (int, float)) else None
    sample: dict[str, Any] = {
        "id": o["prompt_id"], "epoch": int(o.get("trial") or 0) + 1,
        "input": messages if system else text, "target": target, "messages": messages,
        "metadata": {k: o.get(k) for k in ("failure_mode", "golden_reason", "finish_reason", "attempts", "cached",
                                           "checks", "judge_criteria", "key") if o.get(k) is not None},
        "model_usage": model_usage,
    }
    error = o.get("error")
    if error:
        message = f"{error.get('class', 'Error')}: {error.get('message', '')}"
        sample["output"] = {"model": model, "choices": [], "completion": "", "error": message}
        sample["error"] = {"message": message, "traceback": "", "traceback_ansi": ""}
        sample["scores"] = None
    else:
        output = o.get("output") or ""
        reply = {"role": "assistant", "content": output, "source": "generate", "model": model}
        sample["messages"] = messages + [reply]
        sample["output"] = {"model": model, "completion": output, "usage": usage, "time": seconds,
                            "choices": [{"message": reply,
                                         "stop_reason": _STOP.get(o.get("finish_reason") or "", "unknown")}]}
        answer = output if len(output) <= 2000 else output[:2000] + "..."  # the viewer's ANSWER column
        scores: dict[str, Any] = {
            "checks": {"value": _cv(o.get("golden_passed")), "answer": answer, "explanation": o.get("golden_reason")},
            "verdict": {"value": _cv(o.get("passed", o.get("golden_passed"))), "answer": answer,
                        "explanation": o.get("failure_mode") or "passed"},
        }
        if o.get("judge_score") is not None:
            scores["judge"] = {"value": o["judge_score"], "explanation": judge_explanation(o),
                               "metadata": {"criteria": o.get("judge_criteria")} if o.get("judge_criteria") else None}
        sample["scores"] = scores
    if seconds is not None:
        sample["total_time"] = seconds
    return sample
