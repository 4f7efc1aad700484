"""Both modes, end to end, through ``runs.submit`` like any run (in this process, or on the farm when
the ``Target`` names a broker). Each arm (or variant) x task becomes a prompt ``<arm>/<task id>`` whose
``system`` is the arm's addendum, with golden assertions implementing the scorer, so the run's
``passed`` is the quality verdict. A suite is prepared first (``prepare_suite``: the spec, the plan
id, where the artifact goes), so the caller can estimate its cost before anything is sent.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from ..canonical import content_key, sha256_hex
from ..errors import Interrupted, SpecError, UsageError
from ..runs.budget import BudgetStopped, stopped_line
from ..runs.submit import Target, start
from ..spec.models import EvalSpec, PromptSpec
from ..spec.source import PromptSource
from ..spec.sourcemap import line_for, load_yaml, read_text
from ..spec.suite import SpawnTask
from . import artifact as artifact_mod
from . import audit, compare, pair_index, references, sequential
from ..runs.state import StateDir
from ..runs import ledger as ledger_mod
from .executors import ArmExecutor, ArmRun
from .profiles import CONTROL, Profile, profile
from .tasks import load_tasks, load_variant

Progress = Callable[[Any], None]


@dataclass(frozen=True)
class Execution:
    """How the arms' items run: where (``target``), under which budget, watched how, waited how long."""

    target: Target = Target()
    budget_usd: float | None = None
    on_progress: Progress | None = None
    timeout_s: float | None = None  # farm: give up waiting after this long (the run goes on)


def run_arms(spec: EvalSpec, trials: int, how: Execution, adapters: dict[str, Any] | None = None,
             first_trial: int = 0) -> tuple[str, Iterable[dict[str, Any]]]:
    """Run the arms' items like any run; (run id, its outcomes streamed in plan order). A partial run
    (budget, Ctrl-C) compares nothing: it raises instead of returning outcomes. ``first_trial``: the
    index of the first trial (a sequential round r runs trial r)."""
    options: dict[str, Any] = {"budget_usd": how.budget_usd} if how.budget_usd is not None else {}
    if first_trial:
        options["first_trial"] = first_trial
    source = PromptSource(inline=tuple(spec.prompts), count=len(spec.prompts))
    run = start(spec, source, how.target, trials=trials, options=options or None, adapters=adapters,
                on_progress=how.on_progress)
    try:
        run.wait(how.on_progress, how.timeout_s)
    except KeyboardInterrupt:  # on the farm: the arms' run goes on without us
        raise Interrupted(f"detached; the arms' run {run.run_id} goes on on the farm ('evalfarm cancel "
                          f"{run.run_id}' stops it); no comparison was made") from None
    summary = run.summary()
    if summary.get("stopped") == "budget":  # a partial A/B compares nothing: no artifact
        raise BudgetStopped(f"{stopped_line(summary)}; no comparison was made (the arms were not all run)")
    if summary.get("stopped"):  # Ctrl-C in this process: the calls in flight were cancelled
        raise Interrupted(f"{summary['stopped']}: the calls in flight were cancelled and nothing more was sent; "
                          "no comparison was made (the arms were not all run)")
    return run.run_id, run.outcomes()


def assertions(expected: str | None, scorer: str) -> dict[str, Any]:
    """Golden assertions implementing a scorer: ``exact`` = equal after trimming outer whitespace."""
    if scorer == "none" or expected is None:
        return {}
    if scorer == "contains":
        return {"expected_output_contains": [expected]}
    return {"expected_output_contains": [expected],
            "expected_output_regex": r"\A\s*" + re.escape(expected.strip()) + r"\s*\Z"}


def _fields(task: Any, scorer: str) -> dict[str, Any]:
    """What a task asks: a prompt suite's input and the scorer's assertions, or a spawn task's prompt,
    check, setup and budget (spec/suite.py)."""
    if isinstance(task, SpawnTask):
        return {"text": task.prompt, "check": task.check, "setup": task.setup, "timeout_s": task.timeout_s}
    return {"text": task.input, **assertions(task.expected, scorer)}


def _prompts(arms: list[tuple[str, str | None]], tasks: list[Any], scorer: str) -> list[PromptSpec]:
    return [PromptSpec(id=f"{arm}/{t.id}", system=system, tags=[f"ab-arm:{arm}"], **_fields(t, scorer))
            for arm, system in arms for t in tasks]


def _split(outcome: dict[str, Any]) -> tuple[str, str]:
    arm, task = outcome["prompt_id"].split("/", 1)
    return arm, task


# -- suite mode ------------------------------------------------------------------------------------

@dataclass
class SuiteArm:
    name: str
    role: str
    profile: Profile


def plan_arms(arm_a: str, arm_b: str, arms: int) -> tuple[list[SuiteArm], list[dict[str, Any]]]:
    """The arms and the pairs to compare (the first pair is the honest one)."""
    pa, pb = profile(arm_a), profile(arm_b)
    if pa.name == pb.name:
        raise UsageError(f"--arm-a and --arm-b are both {pa.name!r}; compare two different profiles")
    if arms == 2:
        return ([SuiteArm(pa.name, "a", pa), SuiteArm(pb.name, "b", pb)],
                [{"a": pa.name, "b": pb.name, "label": "direct", "honest": True}])
    if pa.name != "baseline":
        raise UsageError(f"--arms 3 runs the unset baseline, the built-in control and the candidate (--arm-b); "
                         f"pass --arm-a baseline (got {pa.name!r})")
    return ([SuiteArm("baseline", "baseline", pa), SuiteArm(CONTROL.name, "control", CONTROL),
             SuiteArm(pb.name, "candidate", pb)],
            [{"a": CONTROL.name, "b": pb.name, "label": "honest", "honest": True},
             {"a": "baseline", "b": pb.name, "label": "conflated", "honest": False}])


@dataclass
class SuiteResult:
    artifact: dict[str, Any]
    data: bytes
    sha256: str
    path: Path
    audit_entry: dict[str, Any]
    ledger: Path


@dataclass
class PreparedSuite:
    """A suite ready to run: its spec (for the cost estimate), the artifact's header and plan id, and
    where the artifact, ledger rows and audit event go."""

    suite: Any
    executor: ArmExecutor
    suite_arms: list[SuiteArm]
    pairs: list[dict[str, Any]]
    header: dict[str, Any]
    plan_id: str
    spec: EvalSpec
    trials: int
    ledger: Path
    reports_dir: Path
    audit_dir: Path


def run_suite(*, suite_path: Path, arm_a: str, arm_b: str, arms: int = 2, trials: int = 1,
              executor: ArmExecutor, role: str = "backend", ledger: Path | None = None,
              reports_dir: Path | None = None, audit_dir: Path | None = None, how: Execution = Execution(),
              before_emit: Callable[[bytes], None] | None = None) -> SuiteResult:
    """Prepare and run a suite (``prepare_suite`` then ``run_prepared``)."""
    prepared = prepare_suite(suite_path=suite_path, arm_a=arm_a, arm_b=arm_b, arms=arms, trials=trials,
                             executor=executor, role=role, ledger=ledger, reports_dir=reports_dir, audit_dir=audit_dir)
    return run_prepared(prepared, how, before_emit)


def prepare_suite(*, suite_path: Path, arm_a: str, arm_b: str, arms: int = 2, trials: int = 1,
                  executor: ArmExecutor, role: str = "backend", ledger: Path | None = None,
                  reports_dir: Path | None = None, audit_dir: Path | None = None,
                  sequential: dict[str, Any] | None = None) -> PreparedSuite:
    """``sequential``: a sequential design (``ab.sequential.design``); ``trials`` is then its most trials
    per task, and the artifact's ``trials`` the rounds run."""
    suite = executor.load_suite(suite_path)
    reports_dir = Path(reports_dir) if reports_dir else StateDir.of().ab_reports
    audit_dir = Path(audit_dir) if audit_dir else StateDir.of().audit
    suite_arms, pairs = plan_arms(arm_a, arm_b, arms)
    ledger = Path(ledger) if ledger else executor.default_ledger()
    header: dict[str, Any] = {
        "schema": artifact_mod.SCHEMA, "event": artifact_mod.EVENT,
        "suite": {"name": suite.name, "sha256": suite.content_hash(), "tasks": len(suite.tasks),
                  "scorer": suite.scorer},
        "executor": executor.describe(), "trials": trials, "arms_mode": arms, "role": role,
        "arm_order": [a.name for a in suite_arms], "pairs": pairs,
        "profiles": {a.profile.name: a.profile.describe() for a in suite_arms},
        "arms": {a.name: {"profile": a.profile.name, "role": a.role, "addendum_sha256": a.profile.addendum_sha256}
                 for a in suite_arms},
    }
    if sequential is not None:
        header["sequential"] = sequential
    plan_id = content_key({k: v for k, v in header.items() if k != "plan"})
    header["plan"] = plan_id
    spec = EvalSpec(name=f"ab-{suite.name}", lineage_tag=f"ab:{plan_id[:12]}", adapters=[executor.adapter()],
                    prompts=_prompts([(a.name, a.profile.addendum) for a in suite_arms], suite.tasks, suite.scorer),
                    trials=trials, workspace=getattr(suite, "workspace", None))
    return PreparedSuite(suite, executor, suite_arms, pairs, header, plan_id, spec, trials, ledger, reports_dir,
                         audit_dir)


def run_prepared(p: PreparedSuite, how: Execution = Execution(),
                 before_emit: Callable[[bytes], None] | None = None) -> SuiteResult:
    """Run the arms, anchor their rows in the ledger, build the artifact, append the audit event, publish."""
    runs = _collect(p, how, p.trials)
    return publish(p, p.header, _anchor(p, runs), before_emit)


def _collect(p: PreparedSuite, how: Execution, trials: int, first_trial: int = 0) -> list[ArmRun]:
    """One submission of every (arm, task) x ``trials`` trials from ``first_trial``: its runs in
    artifact order (arm, task, trial)."""
    suite, executor, suite_arms = p.suite, p.executor, p.suite_arms
    run_id, outcomes = run_arms(p.spec, trials, how, executor.built_adapters(), first_trial)
    order = {a.name: i for i, a in enumerate(suite_arms)}
    task_order = {t.id: i for i, t in enumerate(suite.tasks)}
    prof = {a.name: a.profile.name for a in suite_arms}
    runs = []
    extra = _spend_extra(executor, run_id)
    for o in outcomes:
        arm, task = _split(o)
        passed = None if suite.scorer == "none" or o.get("error") else o.get("passed")
        runs.append(ArmRun(arm=arm, profile=prof[arm], task=task, trial=o["trial"], outcome=o, passed=passed,
                           extra=extra))
    runs.sort(key=lambda r: (order[r.arm], task_order[r.task], r.trial))
    expected = len(suite_arms) * len(suite.tasks) * trials
    if len(runs) != expected:
        raise UsageError(f"the farm returned {len(runs)} results for {expected} items")
    return runs


def _anchor(p: PreparedSuite, runs: list[ArmRun]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """One ledger row per run; the (reference, row) pairs by arm, in artifact order."""
    anchored = p.executor.anchor(runs, p.ledger, p.plan_id)
    rows_by_arm: dict[str, list[tuple[str, dict[str, Any]]]] = {a.name: [] for a in p.suite_arms}
    for run, (ref, row) in zip(runs, anchored):
        rows_by_arm[run.arm].append((ref, row))
    return rows_by_arm


def publish(p: PreparedSuite, header: dict[str, Any], rows_by_arm: dict[str, list[tuple[str, dict[str, Any]]]],
            before_emit: Callable[[bytes], None] | None = None) -> SuiteResult:
    """Build the artifact from anchored rows, append the audit event, publish it and index its pairs."""
    suite, pairs, reports_dir, audit_dir = p.suite, p.pairs, p.reports_dir, p.audit_dir
    prof = {a.name: a.profile.name for a in p.suite_arms}
    art = artifact_mod.build(header, rows_by_arm)
    data = artifact_mod.to_bytes(art)
    sha = sha256_hex(data)
    if before_emit is not None:
        before_emit(data)
    verdict = art["verdict"]
    # staged (reports dir proven writable), then anchored, then published: a failed append leaves no artifact
    staged = artifact_mod.Staged(reports_dir, data)
    try:
        entry = audit.append(audit_dir, artifact_mod.EVENT, event_data(art, sha))
    except BaseException:
        staged.discard()
        raise
    path = staged.publish()
    for pair in pairs:  # every comparison the artifact reports, honest or not, labelled as it is there
        pair_index.record(reports_dir, {"a_profile": prof[pair["a"]], "b_profile": prof[pair["b"]],
                                        "a": pair["a"], "b": pair["b"], "label": pair["label"],
                                        "honest": pair["honest"], "suite": suite.name,
                                        "suite_sha256": header["suite"]["sha256"], "artifact_sha256": sha,
                                        "artifact": path.name, "result": verdict["result"],
                                        "winner": verdict["winner"], "audit_seq": entry["seq"],
                                        "recorded_at": entry["ts"]})
    return SuiteResult(art, data, sha, path, entry, p.ledger)


@dataclass(frozen=True)
class Rounds:
    """How a sequential A/B spends: its budget (USD, None: none) is checked before every round against
    the round's estimate (``runs.budget``) with ``prices``; ``on_round`` sees each round's state."""

    prices: dict[str, Any] | None = None
    on_round: Callable[[dict[str, Any]], None] | None = None


def run_sequential(p: PreparedSuite, how: Execution = Execution(), rounds: Rounds = Rounds(),
                   before_emit: Callable[[bytes], None] | None = None) -> SuiteResult:
    """Rounds of one trial per task per arm (round r = trial r, one submission: one batch on the farm),
    until the honest pair's anytime-valid test decides, ``max_trials`` rounds are run, or the budget
    cannot pay for the next round; then one artifact over every round's anchored rows."""
    from ..runs.budget import affordable

    design = p.header["sequential"]
    honest = next(x for x in p.pairs if x["honest"])
    replay = sequential.Replay(design["alpha"], design["margin"])
    rows_by_arm: dict[str, list[tuple[str, dict[str, Any]]]] = {a.name: [] for a in p.suite_arms}
    stop = None
    for r in range(design["max_trials"]):
        spent = math.fsum(row.get("cost_usd") or 0.0 for rows in rows_by_arm.values() for _, row in rows)
        left = None if how.budget_usd is None else how.budget_usd - spent
        if left is not None and r > 0 and not affordable(p.spec, p.spec.prompts, 1, left, rounds.prices):
            stop = "budget"
            break
        try:
            runs = _collect(p, replace(how, budget_usd=left), 1, first_trial=r)
        except BudgetStopped:
            if r == 0:
                raise
            stop = "budget"  # the round the budget cut short compares nothing: its rows are not anchored
            break
        for arm, got in _anchor(p, runs).items():
            rows_by_arm[arm].extend(got)
        a = [row for _, row in rows_by_arm[honest["a"]] if row.get("trial") == r]
        b = [row for _, row in rows_by_arm[honest["b"]] if row.get("trial") == r]
        [(_, sa, sb)] = sequential.rounds(a, b)
        state = replay.add(r, sa, sb)
        if rounds.on_round is not None:
            rounds.on_round(state)
        if state["decision"] != "continue":
            break
    for arm in rows_by_arm:  # artifact order: task, then trial (round)
        task_order = {t.id: i for i, t in enumerate(p.suite.tasks)}
        rows_by_arm[arm].sort(key=lambda x: (task_order[x[1]["task"]], x[1]["trial"]))
    header = {**p.header, "trials": replay.history[-1]["round"],
              "sequential": {**design, "stopped_because": stop}}
    return publish(p, header, rows_by_arm, before_emit)


def event_data(art: dict[str, Any], sha: str) -> dict[str, Any]:
    """What the audit event says about an artifact (checked again by ``verify``)."""
    v = art["verdict"]
    return {"artifact_sha256": sha, "plan": art["plan"], "suite": art["suite"]["name"],
            "suite_sha256": art["suite"]["sha256"], "pair": [v["a"], v["b"]], "result": v["result"],
            "winner": v["winner"], "executor": art["executor"]["kind"],
            **({"sequential": {k: art["sequential"][k] for k in ("decision", "rounds", "stopped_because")}}
               if "sequential" in art else {})}


def _spend_extra(executor: ArmExecutor, run_id: str) -> dict[str, Any]:
    """Real spend rows are unique per run; deterministic executors' rows are not."""
    if getattr(executor, "deterministic", True):
        return {}
    return {"run_id": run_id, "ts": datetime.now(timezone.utc).isoformat(timespec="seconds")}


# -- verify ----------------------------------------------------------------------------------------

@dataclass
class Verification:
    ok: bool
    checks: list[tuple[str, bool, str]]  # (what, ok, detail)


def verify(artifact_path: Path, ledger: Path | None = None, audit_dir: Path | None = None) -> Verification:
    raw, art = artifact_mod.load(artifact_path)
    checks: list[tuple[str, bool, str]] = []
    sha = sha256_hex(raw)
    named = Path(artifact_path).stem == sha
    checks.append(("content address", named, f"sha256 {sha}" + ("" if named else
                   f" but the file is named {Path(artifact_path).name}")))
    canonical = artifact_mod.to_bytes(art) == raw
    checks.append(("canonical bytes", canonical, "" if canonical else "not canonical JSON (edited by hand?)"))
    if ledger is None:
        ledger = StateDir.of().synthetic_ledger if art.get("executor", {}).get("kind") == "synthetic" \
            else StateDir.of().cost_ledger
    audit_dir = Path(audit_dir) if audit_dir else StateDir.of().audit
    index = ledger_mod.load(ledger)
    problems, rebuilt = artifact_mod.verify_rows(art, index)
    n_rows = sum(len(a["ledger_rows"]) for a in art["arms"].values())
    checks.append(("ledger rows", not problems,
                   f"{n_rows} rows resolved in {ledger}; every aggregate recomputed" if not problems
                   else "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")))
    if "sequential" in art and rebuilt is not None:
        checks.append(("sequential decision", *sequential.check(art["sequential"], rebuilt["sequential"])))
    try:
        good, broken = audit.verify(audit_dir)
        events = [e for e in good if e["event"] == artifact_mod.EVENT and e["data"].get("artifact_sha256") == sha]
        mismatched = [e for e in events if e["data"] != event_data(art, sha)]
        if mismatched:
            checks.append(("audit event", False, f"entry {mismatched[-1]['seq']} records a different verdict or plan "
                                                 "than the artifact"))
        elif events:
            checks.append(("audit event", True, f"entry {events[-1]['seq']} in {audit_dir}"
                           + (f" (chain broken later, at {broken})" if broken else "")))
        else:
            checks.append(("audit event", False, f"no intact {artifact_mod.EVENT} event for {sha[:16]} in {audit_dir}"
                           + (f"; chain broken at {broken}" if broken else "")))
        cited = references.index_problems(Path(artifact_path).parent, good, sha)
        if cited:
            checks.append(("pair index", False, "; ".join(cited[:3])))
    except audit.AuditError as exc:
        checks.append(("audit event", False, str(exc)))
    return Verification(all(ok for _, ok, _ in checks), checks)


# -- variant mode ----------------------------------------------------------------------------------

@dataclass
class PreparedVariants:
    va: Any
    vb: Any
    tasks: list[Any]
    scorer: str
    spec: EvalSpec


def run_variants(*, variant_a: Path, variant_b: Path, tasks_path: Path, scorer: str = "exact",
                 how: Execution = Execution()) -> dict[str, Any]:
    """Prepare and compare two variants (``prepare_variants`` then ``run_prepared_variants``)."""
    return run_prepared_variants(prepare_variants(variant_a=variant_a, variant_b=variant_b, tasks_path=tasks_path,
                                                  scorer=scorer), how)


def prepare_variants(*, variant_a: Path, variant_b: Path, tasks_path: Path, scorer: str = "exact") -> PreparedVariants:
    va, vb = load_variant(variant_a), load_variant(variant_b)
    if va.name == vb.name:
        _, lines = load_yaml(read_text(Path(variant_b)), Path(variant_b))
        raise SpecError(f"both variants are named {va.name!r} (also in {variant_a}); give them different names",
                        path=str(variant_b), line=line_for(lines, ("name",)), field="name")
    tasks = load_tasks(tasks_path)
    spec = EvalSpec(name="ab-variants", adapters=["ab-echo"], trials=1,
                    prompts=_prompts([("a", va.prompt), ("b", vb.prompt)], tasks, scorer))
    return PreparedVariants(va, vb, tasks, scorer, spec)


def run_prepared_variants(p: PreparedVariants, how: Execution = Execution()) -> dict[str, Any]:
    va, vb, tasks, scorer = p.va, p.vb, p.tasks, p.scorer
    _, outcomes = run_arms(p.spec, 1, how)
    scores: dict[tuple[str, str], float | None] = {}
    outputs: dict[tuple[str, str], str | None] = {}
    for o in outcomes:
        key = _split(o)
        outputs[key] = o.get("output")
        scores[key] = None if scorer == "none" or o.get("error") else (1.0 if o.get("passed") else 0.0)
    measured = scorer != "none" and all(s is not None for s in scores.values())

    def figures(side: str, v) -> dict[str, Any]:
        s = [scores[(side, t.id)] for t in tasks]
        passes = sum(1 for x in s if x == 1.0)
        return {"name": v.name, "model": v.model, "prompt_sha256": sha256_hex(v.prompt), "n": len(tasks),
                "passes": passes if measured else None,
                "pass_rate": compare.rnd(passes / len(tasks)) if measured else None,
                "mean_score": compare.rnd(sum(s) / len(s)) if measured else None}  # type: ignore[arg-type]

    per_task = []
    for t in tasks:
        a, b = scores[("a", t.id)], scores[("b", t.id)]
        per_task.append({"id": t.id, "score_a": a, "score_b": b,
                         "delta": compare.rnd(b - a) if a is not None and b is not None else None})
    fa, fb = figures("a", va), figures("b", vb)
    result: dict[str, Any] = {"mode": "variant", "scorer": scorer, "executor": "echo", "a": fa, "b": fb,
                              "tasks": per_task, "parameters": compare.parameters()}
    if not measured:
        result["delta"] = {"pass_rate": {"not_measured": {"axis": "quality", "reason": f"scorer_{scorer}"}}}
        result["verdict"] = {"result": "tie", "winner": None,
                             "reason": "quality not measured (--scorer none): no winner is declared"}
        return result
    rows_a = [{"task": t.id, "passed": scores[("a", t.id)] == 1.0} for t in tasks]
    rows_b = [{"task": t.id, "passed": scores[("b", t.id)] == 1.0} for t in tasks]
    iv = compare.quality_interval(rows_a, rows_b)  # paired by task, one trial each
    lo, hi = compare.rnd(iv.lo), compare.rnd(iv.hi)
    delta = compare.rnd((fb["passes"] - fa["passes"]) / len(tasks))
    excludes = lo > 0 or hi < 0  # type: ignore[operator]
    result["delta"] = {"pass_rate": {"a": fa["pass_rate"], "b": fb["pass_rate"], "delta": delta, "ci95": [lo, hi],
                                     "ci_excludes_zero": excludes, "method": compare.QUALITY_INTERVAL,
                                     "tasks": iv.tasks},
                       "mean_score": compare.rnd(sum(x["delta"] for x in per_task) / len(tasks))}
    ci = f"95% CI [{lo:+.4f}, {hi:+.4f}]"
    margin = compare.NONINFERIORITY_MARGIN
    if abs(delta) > compare.QUALITY_TOLERANCE and excludes:  # type: ignore[arg-type]
        win = fb["name"] if delta > 0 else fa["name"]  # type: ignore[operator]
        result["verdict"] = {"result": "winner", "winner": win,
                             "reason": f"pass rate {fb['pass_rate']:.4f} vs {fa['pass_rate']:.4f} "
                                       f"(delta {delta:+.4f}, {ci})"}
    elif -margin <= lo and hi <= margin:  # type: ignore[operator]
        result["verdict"] = {"result": "tie", "winner": None,
                             "reason": f"pass-rate delta {delta:+.4f}, {ci} inside the non-inferiority margin "
                                       f"+-{margin:g}"}
    else:  # a tie needs evidence: the interval must lie inside the margin; variant mode runs one trial per task
        need = compare.needed_for_tie(rows_a, rows_b, delta, margin, vary_trials=False)  # type: ignore[arg-type]
        more = compare.more_data(need, 1, len(tasks))
        result["verdict"] = {"result": "inconclusive", "winner": None, "tasks_needed": need["tasks_needed"],
                             "reason": f"pass-rate delta {delta:+.4f}, {ci} is not inside the non-inferiority margin "
                                       f"+-{margin:g}: {more}"}
    return result
