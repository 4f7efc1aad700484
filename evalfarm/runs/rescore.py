"""Re-scoring: a stored run's outputs, its prompts as sent, and new scoring, run through the same path
as any run (``runs.submit.start`` with ``stored`` outcomes: the engine replays stage 1, only the judge
is called, in this process or on the farm's judge queue).

A new rubric should not cost a new generation (lm-evaluation-harness #1627). The stored
report carries every output (``outcomes``) and every prompt as it was sent, with its checks
and criteria (``prompts``), so no spec file is needed. ``--spec FILE`` brings new scoring:
for each prompt id the spec knows, its expected answers, checks, criteria and truncation
rule replace the stored ones (the text stays what was sent: the outputs answer it), and the
spec's judge and thresholds apply. ``--judge-model`` swaps the judge's model. The adapters
become ``stored`` stand-ins, so the model under test cannot be called.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from pydantic import ValidationError

from ..core.plan import prompt_json
from ..engine.stored import stored_adapter
from ..errors import UsageError
from ..executors.base import ProgressFn
from ..spec.binding import bind_environment
from ..spec.load import open_spec
from ..spec.models import EvalSpec, JudgeSpec, PromptSpec, Thresholds
from ..spec.source import PromptSource

if TYPE_CHECKING:
    from .state import StateDir
    from .submit import RunHandle, Target

SCORING_FIELDS = ("expected_output_contains", "expected_output_regex", "checks", "criteria", "allow_truncation")
Case = tuple[str, str, int]  # prompt id, adapter, trial


class StoredOutcomes:
    """The source run's outcomes, spooled to a private temporary file as the report is streamed
    (``runs.report_pass`` sink) with a map case -> where its record starts: the replay asks for them
    in plan order, so they are read back in sequence (a seek only for one asked out of order), and a
    million stored outputs never sit in memory. Also collects the prompts section (the run plans
    from it) and what ``_stored_outcomes`` checks. The records are ``marshal``ed: written and read back
    several times faster than JSON, and only by this process."""

    def __init__(self) -> None:
        import tempfile
        import threading

        self._file = tempfile.TemporaryFile(prefix="evalfarm-rescore-")
        self._at: dict[Case, int] = {}  # case -> offset of its record in the spool
        self._lock = threading.Lock()
        self._end = 0
        self._pos = -1  # where the spool's read position is (-1: at its end, writing)
        self.count = 0
        self.second: tuple[int, Case] | None = None  # the first outcome that repeats a case
        self.judged = 0  # outcomes the judge will be asked about, if there is one
        self.prompts = tempfile.TemporaryFile(prefix="evalfarm-rescore-prompts-")  # the prompts section, a line each
        self.prompt_count = 0

    def add(self, o: dict[str, Any], new: Any = None) -> None:
        import marshal

        case = (o["prompt_id"], o["adapter"], o["trial"])
        if case in self._at:
            if self.second is None:
                self.second = (self.count, case)
        else:
            self._at[case] = self._end
        data = marshal.dumps(o)
        self._file.write(len(data).to_bytes(4, "little") + data)
        self._end += 4 + len(data)
        self.count += 1
        if not o.get("error") or (o["error"].get("stage") or "adapter") == "judge":
            self.judged += 1

    def prompt(self, raw: Any) -> None:
        self.prompts.write(json.dumps(raw).encode("utf-8") + b"\n")
        self.prompt_count += 1

    def iter_prompts(self) -> Iterator[Any]:
        """The prompts section as it was read, one parsed prompt at a time."""
        self.prompts.flush()
        self.prompts.seek(0)
        for line in self.prompts:
            yield json.loads(line)

    def first_outside(self, prompt_ids: set[str], adapters: set[str], trials: int) -> tuple[int, Case] | None:
        """The first outcome (index, case) not in the plan these make, if any (in file order), unless a
        repeated case comes before it (then ``second`` is the first error; its index is not needed)."""
        for i, case in enumerate(self._at):  # first occurrences, in file order: i is the index until a repeat
            if case[0] not in prompt_ids or case[1] not in adapters or case[2] >= trials:
                return (i, case) if self.second is None or i < self.second[0] else (self.second[0] + 1, case)
        return None

    def distinct(self) -> int:
        return len(self._at)

    def __getitem__(self, case: Case) -> dict[str, Any]:
        import marshal

        with self._lock:
            at = self._at[case]
            if at != self._pos:  # not the next record in sequence: seek to it
                self._file.flush()
                self._file.seek(at)
            size = int.from_bytes(self._file.read(4), "little")
            data = self._file.read(size)
            self._pos = at + 4 + size
        return marshal.loads(data)


@dataclass
class RescoreInput:
    spec: EvalSpec  # stored adapters, the judge, the thresholds, the prompts with their new scoring
    source: PromptSource
    trials: int
    outcomes: StoredOutcomes  # the source run's stored outcomes by case
    source_run: str
    source_hash: str  # sha256: of the source report's bytes (the lineage stub records it)
    judge_calls: int = 0  # items the judge will be asked about
    notes: list[str] = field(default_factory=list)
    prompts: PromptsFile | None = None  # the file ``source`` streams, removed once the run is planned

    def stored(self, prompt_id: str, adapter: str, trial: int) -> dict[str, Any]:
        return self.outcomes[(prompt_id, adapter, trial)]


def _bad(path: Path, what: str) -> UsageError:
    return UsageError(f"{path}: cannot re-score this report: {what}")


def _prompt(raw: Any, i: int, path: Path) -> PromptSpec:
    try:
        return PromptSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise _bad(path, f"prompts[{i}].{where}: {err['msg']}") from None


class PromptsFile:
    """The run's prompts, checked and given their new scoring one at a time, written as a JSONL
    dataset the re-scoring run streams (``PromptSource.stream``): a million prompts are never a list.
    Removed with ``close``, or at exit when a command stopped before its run started."""

    def __init__(self) -> None:
        import shutil
        import tempfile
        import weakref

        self.folder = Path(tempfile.mkdtemp(prefix="evalfarm-rescore-"))
        self.path = self.folder / "prompts.jsonl"
        self.count = 0
        self.criteria = False  # a prompt has criteria (a judge is needed)
        self.close = weakref.finalize(self, shutil.rmtree, self.folder, True)


def _prompts_file(stored: StoredOutcomes, path: Path, by_id: dict[str, PromptSpec] | None, spec_path: Path | None
                  ) -> tuple[PromptsFile, set[str], list[str]]:
    """The run's prompts as sent, each checked, with ``by_id``'s scoring (a new spec's prompts) where
    it knows the id: (the dataset file, the prompt ids, notes on what changed)."""
    out = PromptsFile()
    ids: set[str] = set()
    kept = changed_text = 0
    try:
        with open(out.path, "wb") as fh:
            for i, raw in enumerate(stored.iter_prompts()):
                p = _prompt(raw, i, path)
                if p.id in ids:
                    raise _bad(path, "its prompts section lists a prompt id twice")
                ids.add(p.id)
                new = by_id.get(p.id) if by_id is not None else None
                if new is None:
                    kept += 1
                    line = json.dumps(raw)  # as the report held it (and checked above)
                else:
                    if new.text not in p.text:  # (a prompt version's user template wraps the case's text)
                        changed_text += 1
                    p = p.model_copy(update={f: getattr(new, f) for f in SCORING_FIELDS})
                    line = prompt_json(p)
                out.criteria = out.criteria or bool(p.criteria)
                fh.write(line.encode("utf-8") + b"\n")
                out.count += 1
    except BaseException:
        out.close()
        raise
    notes = []
    if kept and by_id is not None:
        notes.append(f"{kept} of the run's {out.count} prompts are not in {spec_path}: they keep their stored "
                     "checks and criteria")
    if changed_text:
        notes.append(f"{changed_text} prompt(s) of {spec_path} now read differently from what the run sent: their "
                     "outputs answer the text that was sent, which is what is scored")
    return out, ids, notes


def _stored_outcomes(store: StoredOutcomes, path: Path, prompt_ids: set[str], adapters: list[str],
                     trials: int) -> StoredOutcomes:
    """``store``'s outcomes are the run's plan: each planned (prompt, adapter, trial) once, nothing else
    (the first outcome outside the plan, or repeating a case, named by its index)."""
    outside = store.first_outside(prompt_ids, set(adapters), trials)
    second = store.second
    if outside is not None and (second is None or outside[0] < second[0]):
        raise _bad(path, f"outcomes[{outside[0]}] ({'/'.join(map(str, outside[1]))}) is not in the run's plan")
    if second is not None:
        raise _bad(path, f"outcomes[{second[0]}]: a second result for {'/'.join(map(str, second[1]))}")
    missing = len(prompt_ids) * len(adapters) * trials - store.distinct()
    if missing:
        raise _bad(path, f"{missing} planned item(s) have no stored outcome")
    return store


def rescoring(report: dict[str, Any], path: Path, *, spec_path: Path | None = None, judge_model: str | None = None,
              judge_base_url: str | None = None, stored: StoredOutcomes, digest: str) -> RescoreInput:
    """The re-scoring run of a stored, complete report read from ``path``: ``report`` its head, ``stored``
    its outcomes and prompts as it was read (``runs.report_pass``), ``digest`` the hash of its bytes."""
    if not stored.prompt_count:
        raise _bad(path, "it has no prompts section (reports record each prompt as sent since the prompts "
                         "section was added); run the spec again")
    adapters = list(report.get("adapters") or report["per_adapter"])
    trials = report.get("trials")
    if not isinstance(trials, int) or trials < 1 or not adapters or not all(isinstance(a, str) for a in adapters):
        raise _bad(path, "its trials or adapters are not readable")
    by_id = None
    if spec_path is not None:
        new_spec = open_spec(spec_path)
        by_id = {p.id: p for p in new_spec.source.raw()}
        name, tag, judge, thresholds = (new_spec.spec.name, new_spec.spec.lineage_tag, new_spec.spec.judge,
                                        new_spec.spec.thresholds)
    else:
        name, tag = str(report.get("spec_name") or "rescored"), report.get("lineage_tag")
        try:
            judge = JudgeSpec.model_validate(report["judge"]) if report.get("judge") else None
            thresholds = Thresholds.model_validate(report.get("thresholds") or {})
        except ValidationError as exc:
            raise _bad(path, f"its judge or thresholds are not valid ({exc.errors()[0]['msg']}); pass --spec FILE") \
                from None
    prompts, ids, notes = _prompts_file(stored, path, by_id, spec_path)
    try:
        if judge_model:
            judge = (judge.model_copy(update={"model": judge_model}) if judge is not None
                     else JudgeSpec(model=judge_model))
        if judge is None and prompts.criteria:
            notes.append("the prompts have criteria but there is no judge: pass --judge-model M to judge them")
        outcomes = _stored_outcomes(stored, path, ids, adapters, trials)
        ids.clear()
        try:
            spec = EvalSpec(name=name, lineage_tag=tag, adapters=list(adapters), judge=judge, thresholds=thresholds,
                            trials=trials)
        except ValidationError as exc:
            raise _bad(path, str(exc.errors()[0]["msg"])) from None
        spec = bind_environment(spec, judge_base_url=judge_base_url)  # the judge's endpoint; adapters are stand-ins
        spec = spec.model_copy(update={"adapters": [stored_adapter(a, report["run_id"]) for a in adapters]})
    except BaseException:
        prompts.close()
        raise
    judged = stored.judged if spec.judge is not None else 0
    return RescoreInput(spec=spec, source=PromptSource(stream=prompts.path, count=prompts.count, checked=True), trials=trials,
                        outcomes=outcomes, source_run=report["run_id"], source_hash=digest, judge_calls=judged,
                        notes=notes, prompts=prompts)


@dataclass
class Rescore:
    """A re-scoring run, prepared: what it replays, and what the new run records of its source."""

    input: RescoreInput
    prompt_info: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what the trust check of the source report says

    def start(self, target: "Target", on_progress: ProgressFn | None = None) -> "RunHandle":
        from .submit import start

        rin = self.input
        try:
            return start(rin.spec, rin.source, target, trials=rin.trials, on_progress=on_progress,
                         stored=lambda item: rin.stored(item.prompt.id, item.adapter, item.trial))
        finally:
            if rin.prompts is not None:
                rin.prompts.close()


def prepare(run_ref: str, state: "StateDir", *, spec_path: Path | None = None, judge_model: str | None = None,
            judge_base_url: str | None = None) -> Rescore:
    """The re-scoring run of a stored, complete run (a path, run id, prefix or ``baseline:NAME``)."""
    from .archive import require_complete
    from .registry import Registry, resolve_ref
    from .report_pass import read_pass

    path = resolve_ref(run_ref, state.root)
    # streamed once: the outcomes go to a temporary store, the hash is checked (edited: exit 2, runs.trust)
    p = read_pass(path, state, "rescore", StoredOutcomes)
    trusted = p.trusted
    report = require_complete(trusted.report, str(path))
    source_entry = Registry(state.root).get(report["run_id"]) if state.has_registry() else None
    rin = rescoring(report, path, spec_path=spec_path, judge_model=judge_model, judge_base_url=judge_base_url,
                    stored=p.sink, digest=trusted.digest)
    entry = source_entry or {}
    prompt = entry.get("prompt")
    info = {"dataset_hash": entry.get("dataset_hash"),
            "prompt": {**prompt, "resolved_by": f"run {report['run_id']}"} if prompt else None,
            "models": entry.get("models"), "source_run": report["run_id"], "source_hash": rin.source_hash}
    return Rescore(rin, info, list(trusted.notes))
