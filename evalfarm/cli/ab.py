"""``evalfarm ab`` (variant and suite modes, ``verify``, ``latest``) and ``evalfarm audit verify``.

Exit codes: 0 ok (whatever the verdict), 1 a verification failed, 2 bad usage or input,
3 nothing measured (every run errored; the artifact is still emitted), 4 the audit chain could not be appended (and then no artifact is written).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from .overnight import budget_options

VARIANT_FLAGS = ("variant_a", "variant_b", "tasks")
SUITE_FLAGS = ("suite", "arm_a", "arm_b")
SUITE_ONLY = ("arms", "trials", "executor", "model", "role", "timeout_s", "ledger", "reports_dir", "audit_dir",
              "base_url", "api_key_env", "price", "agent", "until_decided", "max_trials", "alpha", "margin", "plan")
SEQUENTIAL_ONLY = ("max_trials", "alpha", "margin")
VARIANT_ONLY = ("scorer",)


def _flag(name: str) -> str:
    return "--" + {"timeout_s": "timeout"}.get(name, name).replace("_", "-")


def _execute(o: dict[str, Any], spec, trials: int, prices: dict[str, Any] | None, timeout_s: float | None):
    """Run ``fn(how)`` with the arms' execution: the estimate shown and the budget checked first (only with
    a budget: the synthetic executor's price is a model's, not a bill), then live progress."""
    from ..ab.harness import Execution
    from ..runs.submit import Target
    from .live import LiveProgress
    from .overnight import check_budget

    budget = check_budget(spec, spec.prompts, trials, o["max_cost"], o["force"], prices, priced_only=False)

    def run(fn):
        with LiveProgress(enabled=False if o["as_json"] else None) as bar:
            return fn(Execution(Target(broker=o["broker"]), budget, bar.update, timeout_s))

    return run


def _price(value: str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        a, b = (float(x) for x in value.split(","))
        if a < 0 or b < 0:
            raise ValueError
        return a, b
    except ValueError:
        raise UsageError(f"--price {value!r}: expected INPUT,OUTPUT in USD per million tokens, e.g. 3,15") from None


def _prices(executor: Any) -> dict[str, Any]:
    """What the estimate cannot know from the spec: the synthetic executor's fixed price."""
    from ..spec.models import Price

    price = executor.describe().get("price_usd_per_mtok")
    adapter = executor.adapter()
    if price is None or not isinstance(adapter, str):
        return {}
    return {adapter: Price(input=price["input_per_mtok"], output=price["output_per_mtok"])}


def _emit(payload: bytes, output: Path | None, as_json: bool) -> None:
    if output is not None:
        from ..runs.archive import atomic_write
        if output.is_dir():
            raise UsageError(f"--output {output}: is a directory; give a file path")
        atomic_write(output, payload)
    if as_json:
        sys.stdout.write(payload.decode("ascii") + "\n")


def _fmt(v: Any, spec: str = "{:.4f}") -> str:
    return "n/a" if v is None else spec.format(v)


def _print_suite(res) -> None:
    a = res.artifact
    click.echo(f"suite {a['suite']['name']} ({a['suite']['tasks']} tasks, scorer {a['suite']['scorer']}), "
               f"executor {a['executor']['kind']}, {a['trials']} trial(s), {a['arms_mode']} arms")
    click.echo(f"{'arm':<10} {'role':<10} {'runs':>5} {'pass rate':>9} {'med tokens':>10} {'med USD':>12} "
               f"{'total USD':>12}  not measured")
    for name in a["arm_order"]:
        f = a["arms"][name]
        click.echo(f"{name:<10} {f['role']:<10} {f['runs']:>5} {_fmt(f['pass_rate']):>9} "
                   f"{_fmt(f['median_tokens'], '{:.1f}'):>10} {_fmt(f['median_usd'], '{:.8f}'):>12} "
                   f"{_fmt(f['total_usd'], '{:.8f}'):>12}  {', '.join(f['not_measured']) or '-'}")
    for c in a["comparisons"]:
        parts = []
        for name, d in c["deltas"].items():
            if "not_measured" in d:
                parts.append(f"{name}: not measured")
            else:
                ci = d["ci95"]
                parts.append(f"{name} {d['delta']:+.6g} " + (f"[{ci[0]:+.6g}, {ci[1]:+.6g}]" if ci else "(no interval)"))
        click.echo(f"{c['b']} vs {c['a']} ({c['label']}): " + "; ".join(parts))
    v = a["verdict"]
    head = {"winner": f"WINNER {v['winner']} (by {v['decided_by']})", "tie": "TIE", "inconclusive": "INCONCLUSIVE",
            "incomparable": "INCOMPARABLE"}[v["result"]]
    click.echo(f"{head}: {v['reason']}")
    if "sequential" in a:
        from ..ab.sequential import summary_line

        click.echo(summary_line(a["sequential"], a["suite"]["tasks"], len(a["arm_order"])))
    for m in v["not_measured"]:
        click.echo(f"  not measured: {m['arm']} {m['axis']} ({m['reason']}, {m['runs_missing']} run(s))")
    for name in a["arm_order"]:
        f = a["arms"][name]
        if "agents" in f:  # spawn arms
            click.echo(f"{name:<10} agent {', '.join(f['agents']) or 'n/a'}; models {', '.join(f['models_used']) or 'n/a'}"
                       f"; median turns {_fmt(f['median_turns'], '{:g}')}, tool calls "
                       f"{_fmt(f['median_tool_calls'], '{:g}')}, diff lines {_fmt(f['median_diff_lines'], '{:g}')}")
    click.echo(f"artifact {res.path}")
    click.echo(f"audit entry {res.audit_entry['seq']}; ledger {res.ledger}")


def _round_line(state: dict[str, Any]) -> None:
    """A sequential round's state, on stderr as it happens."""
    click.echo(f"evalfarm: round {state['round']}: {state['n']} pairs, b-a {state['estimate']:+.4f}, anytime-valid "
               f"interval [{state['lo']:+.4f}, {state['hi']:+.4f}]: {state['decision']}", err=True)


def _print_variants(r: dict[str, Any]) -> None:
    click.echo(f"{'variant':<16} {'n':>4} {'passes':>6} {'pass rate':>9} {'mean score':>10}")
    for side in ("a", "b"):
        f = r[side]
        click.echo(f"{f['name']:<16} {f['n']:>4} {_fmt(f['passes'], '{}'):>6} {_fmt(f['pass_rate']):>9} "
                   f"{_fmt(f['mean_score']):>10}")
    click.echo(f"{'task':<24} {'a':>5} {'b':>5} {'delta':>6}")
    for t in r["tasks"]:
        click.echo(f"{t['id']:<24} {_fmt(t['score_a'], '{:.2f}'):>5} {_fmt(t['score_b'], '{:.2f}'):>5} "
                   f"{_fmt(t['delta'], '{:+.2f}'):>6}")
    v = r["verdict"]
    click.echo(f"WINNER {v['winner']}: {v['reason']}" if v["result"] == "winner" else
               f"{v['result'].upper()}: {v['reason']}")


path_option = dict(type=click.Path(dir_okay=False, path_type=Path))
dir_option = dict(type=click.Path(file_okay=False, path_type=Path))


@click.group(invoke_without_command=True)
@click.option("--variant-a", **path_option, help="Variant mode: variant A (name, prompt, model?).")
@click.option("--variant-b", **path_option, help="Variant mode: variant B.")
@click.option("--tasks", **path_option, help="Variant mode: tasks file (tasks: [{id, input, expected}]).")
@click.option("--scorer", type=click.Choice(["exact", "none"]), help="Variant mode scorer [default: exact].")
@click.option("--suite", **path_option, help="Suite mode: suite YAML (tasks: [...], name?, scorer?).")
@click.option("--arm-a", help="Suite mode: profile of arm A (baseline, balanced, terse, verbose).")
@click.option("--arm-b", help="Suite mode: profile of arm B (the candidate with --arms 3).")
@click.option("--arms", type=click.Choice(["2", "3"]), help="3 adds the built-in control arm [default: 2].")
@click.option("--trials", type=click.IntRange(1, 1000), help="Trials per (arm, task) [default: 1].")
@click.option("--until-decided", is_flag=True,
              help="Suite mode: rounds of one trial per task per arm until an anytime-valid paired test decides "
                   "(or --max-trials rounds, or the budget); peeking every round keeps its error rate.")
@click.option("--max-trials", type=click.IntRange(1, 1000),
              help="With --until-decided: the most rounds (trials per task) [default: 20].")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="With --until-decided: the error rate of the test, however often it is looked at [default: 0.05].")
@click.option("--margin", type=click.FloatRange(0, 1, max_open=True),
              help="With --until-decided: differences within +-M count as equivalent (a tie); 0 never declares one "
                   "[default: 0.05, the fixed design's non-inferiority margin].")
@click.option("--plan", is_flag=True,
              help="Suite mode: print the design, its estimated cost and the smallest pass-rate difference it detects "
                   "at 80% power (variance from the last comparison of this suite, else the worst case), and exit "
                   "without calling any model.")
@click.option("--executor", type=click.Choice(["synthetic", "provider", "spawn"]),
              help="synthetic: offline, deterministic; provider: a real OpenAI-compatible model; "
                   "spawn: real coding agents in git worktrees (a spawn suite) [default: synthetic].")
@click.option("--model", help="Model for provider and spawned arms (the pin); the model label in the artifact.")
@click.option("--agent", help="Spawn executor: claude, codex, gemini, aider, opencode [default: the suite's agent "
                              "adapter].")
@click.option("--role", help="Agent role for spawned arms, recorded in the artifact [default: backend].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              help="Spawn: seconds per spawned task [default: 1800]; otherwise: max seconds to wait for the arms' "
                   "items on the farm [default: 1800].")
@click.option("--ledger", **path_option, help="Spend ledger [synthetic: STATE/ab/ledger.jsonl; provider: "
                                               "STATE/cost/ledger.jsonl; STATE: EVALFARM_STATE_DIR or .evalfarm].")
@click.option("--reports-dir", **dir_option, help="Artifact directory [default: STATE/reports/eval_ab].")
@click.option("--audit-dir", **dir_option, help="Audit chain directory [default: STATE/audit].")
@click.option("--base-url", help="Provider executor: OpenAI-compatible base URL (or EVAL_BASE_URL); spawn: the "
                                 "model endpoint the agent calls [default: the agent's own].")
@click.option("--api-key-env", help="Provider/spawn executor: NAME of the env variable holding the key "
                                    "[default: EVAL_API_KEY; spawn: the agent's own, e.g. ANTHROPIC_API_KEY].")
@click.option("--price", help="Provider/spawn executor: INPUT,OUTPUT USD per million tokens (provider: without it "
                              "cost is not measured; spawn: used when the agent reports no cost).")
@click.option("--broker", envvar="EVALFARM_BROKER_URL", metavar="URL",
              help="redis://... to run the arms on workers; default: in this process, no server.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison JSON on stdout.")
@click.option("--output", "-o", **path_option, help="Also write the comparison JSON here.")
@budget_options
@click.pass_context
def ab(ctx: click.Context, **opts: Any) -> None:
    """Compare two prompt variants, or one suite under two or three response-style profiles.

    \b
    evalfarm ab --variant-a a.yaml --variant-b b.yaml --tasks tasks.yaml [--scorer exact|none]
    evalfarm ab --suite suite.yaml --arm-a balanced --arm-b terse [--arms 3] [--trials N] ...
    evalfarm ab verify ARTIFACT [--ledger PATH] [--audit-dir DIR]
    """
    given = {k for k, v in opts.items() if v not in (None, False) and k != "broker"}
    if ctx.invoked_subcommand is not None:
        if given:
            raise UsageError(f"{', '.join(sorted(_flag(k) for k in given))}: options of 'evalfarm ab' go without "
                             f"a subcommand; 'ab {ctx.invoked_subcommand}' takes its own options")
        return
    variant = [k for k in VARIANT_FLAGS if k in given]
    suite = [k for k in SUITE_FLAGS if k in given]
    if variant and suite:
        raise UsageError("choose one mode: variant (--variant-a/--variant-b/--tasks) or suite "
                         "(--suite/--arm-a/--arm-b), not both")
    if not variant and not suite:
        raise UsageError("nothing to compare: pass --variant-a, --variant-b and --tasks, "
                         "or --suite, --arm-a and --arm-b ('evalfarm ab --help')")
    mode_flags, wrong = (VARIANT_FLAGS, SUITE_ONLY) if variant else (SUITE_FLAGS, VARIANT_ONLY)
    missing = [k for k in mode_flags if k not in given]
    if missing:
        raise UsageError(f"{'variant' if variant else 'suite'} mode needs "
                         f"{', '.join(_flag(k) for k in mode_flags)} together (missing {', '.join(map(_flag, missing))})")
    stray = [k for k in wrong if k in given]
    if stray:
        raise UsageError(f"{', '.join(map(_flag, stray))} only applies to {'suite' if variant else 'variant'} mode")
    if opts["executor"] not in ("provider", "spawn"):
        extra = [k for k in ("base_url", "api_key_env", "price") if k in given]
        if extra:
            raise UsageError(f"{', '.join(map(_flag, extra))} only applies with --executor provider or spawn")
    if opts["executor"] != "spawn" and "agent" in given:
        raise UsageError("--agent only applies with --executor spawn")
    if not opts["until_decided"] and any(k in given for k in SEQUENTIAL_ONLY):
        raise UsageError(f"{', '.join(_flag(k) for k in SEQUENTIAL_ONLY if k in given)} only applies with --until-decided")
    if opts["until_decided"] and "trials" in given:
        raise UsageError("--trials and --until-decided: a sequential A/B runs one trial per task per round; "
                         "bound the rounds with --max-trials")
    if variant:
        _variant_mode(opts)
    else:
        _suite_mode(opts)


def _check_outputs(o: dict[str, Any], executor=None) -> None:
    """Every file and directory the command will write, checked before anything is run or spent."""
    from ..runs.archive import check_writable, check_writable_dir

    if o["output"] is not None:
        check_writable(o["output"], "--output")
    if executor is None:
        return
    from ..ab import audit
    from ..runs.state import StateDir

    try:
        check_writable_dir(o["reports_dir"] or StateDir.of().ab_reports, "--reports-dir")
    except UsageError as exc:
        raise UsageError(f"cannot write the artifact: {exc}") from None
    check_writable(o["ledger"] or executor.default_ledger(), "--ledger")
    audit.check_appendable(o["audit_dir"] or StateDir.of().audit)


def _variant_mode(o: dict[str, Any]) -> None:
    from ..ab.harness import prepare_variants, run_prepared_variants

    _check_outputs(o)
    prepared = prepare_variants(variant_a=o["variant_a"], variant_b=o["variant_b"], tasks_path=o["tasks"],
                                scorer=o["scorer"] or "exact")
    result = _execute(o, prepared.spec, 1, None, None)(lambda how: run_prepared_variants(prepared, how))
    from ..canonical import canonical_json
    _emit(canonical_json(result).encode("ascii"), o["output"], o["as_json"])
    if not o["as_json"]:
        _print_variants(result)


def _suite_mode(o: dict[str, Any]) -> None:
    from ..ab.choose import executor_for
    from ..ab.harness import Rounds, plan_arms, prepare_suite, run_prepared, run_sequential

    arms = int(o["arms"] or 2)
    plan_arms(o["arm_a"], o["arm_b"], arms)  # profile and arm errors before any work
    spawn = o["executor"] == "spawn"
    executor = executor_for(o["executor"] or "synthetic", model=o["model"], base_url=o["base_url"],
                            api_key_env=o["api_key_env"], price=_price(o["price"]), role=o["role"] or "backend",
                            timeout_s=o["timeout_s"], agent=o["agent"])
    executor.load_suite(o["suite"])  # the suite (and, spawn, the repo, base and agent) before any work
    if not o["plan"]:  # a plan writes nothing
        _check_outputs(o, executor)
    design = None
    if o["until_decided"]:
        from ..ab import sequential

        design = sequential.design(o["alpha"] or 0.05, 0.05 if o["margin"] is None else o["margin"],
                                   o["max_trials"] or sequential.DEFAULT_MAX_TRIALS)
    trials = design["max_trials"] if design else o["trials"] or 1
    prepared = prepare_suite(suite_path=o["suite"], arm_a=o["arm_a"], arm_b=o["arm_b"], arms=arms, trials=trials,
                             executor=executor, role=o["role"] or "backend", ledger=o["ledger"],
                             reports_dir=o["reports_dir"], audit_dir=o["audit_dir"], sequential=design)
    if o["plan"]:
        from ..ab import planning

        p = planning.plan(prepared, design, _prices(executor))
        if o["as_json"]:
            click.echo(planning.to_json(p))
        else:
            for line in planning.lines(p):
                click.echo(line)
        return
    # spawn: --timeout bounds each task; the run takes as long as its tasks do
    wait_s = None if spawn else o["timeout_s"] or 1800.0
    if design:  # the budget is checked for one round now, and before every later round
        res = _execute(o, prepared.spec, 1, _prices(executor), wait_s)(
            lambda how: run_sequential(prepared, how, Rounds(_prices(executor), _round_line)))
    else:
        res = _execute(o, prepared.spec, trials, _prices(executor), wait_s)(lambda how: run_prepared(prepared, how))
    _emit(res.data, o["output"], o["as_json"])
    if not o["as_json"]:
        _print_suite(res)
    if all(a["not_measured"].get("quality", {}).get("runs_errored") == a["runs"] for a in res.artifact["arms"].values()):
        click.echo("evalfarm: nothing measured: every run errored (runtime errors, not quality); "
                   "the artifact records it as incomparable", err=True)
        sys.exit(3)


@ab.command("verify")
@click.argument("artifact", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--ledger", **path_option, help="The ledger the artifact's rows live in "
                                               "[default: by executor, as when it was made].")
@click.option("--audit-dir", **dir_option, help="[default: STATE/audit; STATE: EVALFARM_STATE_DIR or .evalfarm]")
@click.option("--json", "as_json", is_flag=True)
def ab_verify(artifact: Path, ledger: Path | None, audit_dir: Path | None, as_json: bool) -> None:
    """Recompute every aggregate from the referenced ledger rows; check the hash and the audit event."""
    from ..ab.harness import verify

    result = verify(artifact, ledger=ledger, audit_dir=audit_dir)
    if as_json:
        click.echo(json.dumps({"ok": result.ok, "checks": [{"check": c, "ok": ok, "detail": d}
                                                          for c, ok, d in result.checks]}, indent=2))
    else:
        for check, ok, detail in result.checks:
            click.echo(f"{'ok  ' if ok else 'FAIL'} {check}: {detail}".rstrip(": "))
        click.echo("VERIFIED" if result.ok else "NOT VERIFIED")
    sys.exit(0 if result.ok else 1)


@ab.command("latest")
@click.argument("profile_a")
@click.argument("profile_b")
@click.option("--reports-dir", **dir_option, help="[default: STATE/reports/eval_ab]")
@click.option("--suite", "suite_name", help="Only comparisons of this suite (by name).")
def ab_latest(profile_a: str, profile_b: str, reports_dir: Path | None, suite_name: str | None) -> None:
    """The latest comparison of a profile pair (either order), from the pair index."""
    from ..runs.state import StateDir
    from ..ab.pair_index import latest

    reports_dir = reports_dir or StateDir.of().ab_reports
    entry = latest(reports_dir, profile_a, profile_b, suite_name)
    if entry is None:
        click.echo(f"no comparison of {profile_a} and {profile_b} in {reports_dir}", err=True)
        sys.exit(1)
    if entry.get("honest") is False:
        click.echo(f"evalfarm: note: the artifact labels this comparison {entry.get('label') or 'conflated'}: "
                   f"{entry.get('a')} vs {entry.get('b')} differ in more than the profile; its honest comparison is "
                   "the control arm's against the candidate", err=True)
    click.echo(json.dumps({**entry, "path": str(reports_dir / entry["artifact"])}, indent=2, sort_keys=True))


@click.group()
def audit() -> None:
    """The append-only, HMAC-chained audit log."""


@audit.command("verify")
@click.option("--audit-dir", **dir_option, help="[default: STATE/audit; STATE: EVALFARM_STATE_DIR or .evalfarm]")
@click.option("--reports-dir", **dir_option, help="Artifacts and pair index whose audit entries must still be in "
                                                   "the chain [default: STATE/reports/eval_ab]")
@click.option("--seal", is_flag=True, help="Write chain.head for the chain as it is now (a chain made before heads "
                                           "existed); only after making sure nothing was cut.")
def audit_verify(audit_dir: Path | None, reports_dir: Path | None, seal: bool) -> None:
    """Check every entry's HMAC and link, the chain's length against its signed head, and that every
    artifact and pair-index line still has its entry; name the first problem (exit 1)."""
    from ..ab import audit as chain
    from ..runs.state import StateDir
    from ..ab.references import artifact_problems, index_problems

    audit_dir = audit_dir or StateDir.of().audit
    reports_dir = reports_dir or StateDir.of().ab_reports
    try:
        if seal:
            good = chain.seal(audit_dir)
            click.echo(f"SEALED: {audit_dir / chain.HEAD} records {len(good)} entr{'y' if len(good) == 1 else 'ies'}")
            return
        good, broken = chain.verify(audit_dir)
    except chain.AuditError as exc:
        raise UsageError(str(exc)) from None
    n = f"{len(good)} entr{'y' if len(good) == 1 else 'ies'}"
    if broken is not None:
        click.echo(f"BROKEN: {broken} in {audit_dir / chain.CHAIN}; {n} before it verified")
        sys.exit(1)
    problems = index_problems(reports_dir, good) + artifact_problems(reports_dir, good)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        click.echo(f"BROKEN: {problems[0]}{more}; the chain {audit_dir / chain.CHAIN} has {n}")
        sys.exit(1)
    click.echo(f"OK: {n} verified in {audit_dir / chain.CHAIN}; the artifacts and pair index in {reports_dir} "
               "cite only entries it has")
