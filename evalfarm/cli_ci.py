"""CI commands and run options: the gate, baselines, the registry listing, case-level diff.

``run`` gets ``ci_run_options`` (``--gate --promote --baseline --prompt-version --junit
--pr-summary``) and ends with ``finish_run``; ``gate`` and ``baseline`` are commands of their own.
Nothing here calls a model: the gate re-reads stored reports.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import click

from .errors import EXIT_NOTHING_MEASURED, EvalfarmError, UsageError


class NothingMeasuredError(EvalfarmError):
    exit_code = EXIT_NOTHING_MEASURED


from .cli_options import state_dir_option as _state_dir_option  # noqa: E402
from .report import exit_code_of  # noqa: E402


def ci_run_options(f: Callable) -> Callable:
    """The CI flags of ``run``; they reach the command as keyword arguments (``**ci``)."""
    options = [
        click.option("--gate", is_flag=True,
                     help="Apply the three brakes (floor, drop, regressions) against the baseline; exit 1 on failure."),
        click.option("--promote", is_flag=True,
                     help="Make this run the baseline (--baseline NAME, default: the spec name) if it passes the gate."),
        click.option("--baseline", metavar="NAME",
                     help="Named baseline to compare with (default: the one named after the spec, if any)."),
        click.option("--prompt-version", metavar="V",
                     help="Version of the spec's prompt (prompts/<name>/<V>.txt|.yaml); default: its 'current' pointer."),
        click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                     help="Write JUnit XML: one testcase per case and adapter."),
        click.option("--pr-summary", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                     help="Write a short Markdown summary for a pull-request comment."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _echo(lines: list[str], err: bool) -> None:
    for line in lines:
        click.echo(line, err=err)


def _baseline_for(name: str | None, default: str | None, state_dir: Path):
    """(name, report) of the baseline to compare with: ``name`` (a baseline name or any run
    reference) must exist; ``default`` (the spec name) is used when it does."""
    from .artifacts import load_report
    from .registry import baseline_report, resolve_ref

    if name:
        found = baseline_report(name, state_dir)
        if found is not None:
            return name, found[1]
        try:
            return name, load_report(resolve_ref(name, state_dir))
        except UsageError:
            raise UsageError(f"--baseline {name}: no baseline of that name and no such run in {state_dir}; "
                             "see 'evalfarm ls --baselines'") from None
    if default:
        found = baseline_report(default, state_dir)
        if found is not None:
            return default, found[1]
    return None, None


def finish_run(report: dict[str, Any], raw: bytes, json_path: Path | None, state_dir: Path, spec: Any,
               options: dict[str, Any]) -> int:
    """After ``run`` saved its report: record it, gate, promote, write JUnit / PR summary; the exit code."""
    from .ci_reports import pr_summary, write_junit, write_pr_summary
    from .diff import compare_cases, describe_cases
    from .gate import evaluate
    from .registry import Registry
    from .spec import Thresholds

    state_dir = Path(state_dir)
    err = bool(options.get("as_json"))  # stdout carries the report JSON: talk on stderr
    gate_on, promote, name = bool(options.get("gate")), bool(options.get("promote")), options.get("baseline")
    info = getattr(spec, "_prompt_info", None) or {}
    prompt = info.get("prompt")
    if promote and json_path is None:
        raise UsageError("--promote needs the run saved under the state dir; drop --no-save")
    registry = Registry(state_dir) if json_path is not None or gate_on or name else None
    if json_path is not None:
        registry.record(report, json_path, dataset_hash=info.get("dataset_hash"), prompt=prompt)
    if prompt:
        _echo([f"prompt {prompt['name']}@{prompt['version']} ({prompt['hash'][:19]}, by {prompt['resolved_by']})"], err)

    result = baseline = None
    base_name = None
    if gate_on or promote or name:
        try:
            base_name, baseline = _baseline_for(name, report.get("spec_name"), state_dir)
        except UsageError:
            if not promote:  # --promote --baseline NEW creates it
                raise
        if baseline is not None and not gate_on:
            _echo([f"against baseline {base_name!r} (run {baseline.get('run_id')}):",
                   *("  " + x for x in describe_cases(compare_cases(baseline, report)))], err)
    if gate_on or promote:
        thresholds = spec.thresholds if spec is not None else Thresholds.model_validate(report["thresholds"])
        result = evaluate(report, thresholds, baseline, base_name)
        if gate_on:
            _echo(result.lines(), err)
            if result.cases is not None:
                _echo(["  " + x for x in describe_cases(result.cases)], err)
        if json_path is not None:
            registry.set_gate(report["run_id"], result.to_dict())
    if promote:
        target = name or report.get("spec_name")
        if result.passed:
            prev = registry.promote(target, report, json_path)
            _echo([f"promoted run {report['run_id']} to baseline {target!r}"
                   + (f" (was {prev})" if prev else " (new baseline)")], err)
        else:
            why = "nothing was measured" if result.nothing_measured else \
                "the gate failed: " + ", ".join(b.name for b in result.brakes if b.failed)
            _echo([f"not promoted to baseline {target!r}: {why}"], err)
    if options.get("junit"):
        write_junit(options["junit"], report, result if gate_on else None)
    if options.get("pr_summary"):
        write_pr_summary(options["pr_summary"], pr_summary(report, result if gate_on else None, baseline, prompt,
                                                           str(json_path) if json_path else None))
    if gate_on:
        return result.exit_code
    return exit_code_of(report)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--baseline", "baseline_name", metavar="NAME",
              help="Baseline to compare with (a name, or any run reference); default: the one named after "
                   "the run's spec, if any.")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Take the thresholds from this spec (the current ones); default: those stored in the run.")
@_state_dir_option
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE")
@click.option("--pr-summary", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print the gate result as JSON.")
def gate(run_ref: str, baseline_name: str | None, spec_path: Path | None, state_dir: Path, junit: Path | None,
         pr_summary: Path | None, as_json: bool) -> None:
    """Re-evaluate a stored RUN against the current thresholds; calls no model.

    Exit 0 passed, 1 a brake failed, 3 nothing was measured in RUN.
    """
    import sys

    from .artifacts import load_report
    from .ci_reports import pr_summary as render_summary, write_junit, write_pr_summary
    from .diff import describe_cases
    from .gate import evaluate
    from .registry import Registry, resolve_ref
    from .spec import Thresholds, load_spec

    path = resolve_ref(run_ref, state_dir)
    report = load_report(path)
    if spec_path is not None:
        thresholds = load_spec(spec_path).thresholds
    else:
        try:
            thresholds = Thresholds.model_validate(report.get("thresholds") or {})
        except Exception as exc:
            raise UsageError(f"{path}: thresholds stored in the run are not valid ({exc}); pass --spec FILE") from None
    name, baseline = _baseline_for(baseline_name, report.get("spec_name"), state_dir)
    result = evaluate(report, thresholds, baseline, name)
    entry = Registry(state_dir).get(report.get("run_id", "")) if (state_dir / "registry.db").is_file() else None
    if entry is not None:
        Registry(state_dir).set_gate(entry["run_id"], result.to_dict())
    if junit:
        write_junit(junit, report, result)
    if pr_summary:
        write_pr_summary(pr_summary, render_summary(report, result, baseline, (entry or {}).get("prompt"), str(path)))
    if as_json:
        click.echo(json.dumps(result.to_dict(with_cases=True), indent=2))
    else:
        click.echo(f"run {report.get('run_id')} ({report.get('spec_name')}), thresholds from "
                   f"{spec_path if spec_path else 'the run'}")
        _echo(result.lines(), False)
        if result.cases is not None:
            _echo(["  " + x for x in describe_cases(result.cases)], False)
    sys.exit(result.exit_code)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--name", metavar="NAME", help="Baseline name; default: the run's spec name.")
@_state_dir_option
def baseline(run_ref: str, name: str | None, state_dir: Path) -> None:
    """Promote a stored RUN (path, id, id prefix, baseline:NAME) to a named baseline."""
    from .artifacts import list_runs, load_report, runs_dir, save_report
    from .registry import Registry, is_stored, resolve_ref

    path = resolve_ref(run_ref, state_dir)
    report = load_report(path)
    if report.get("nothing_measured"):
        raise NothingMeasuredError(f"{path}: run {report.get('run_id')} measured nothing (every item errored); "
                                   "it cannot be a baseline")
    if "run_id" not in report or "outcomes" not in report:
        raise UsageError(f"{path}: not a complete evalfarm report (no run_id or outcomes)")
    if not is_stored(path, state_dir):  # a report from elsewhere: keep a copy the baseline can rely on
        stored = runs_dir(state_dir) / f"{report['run_id']}.json"
        if stored not in list_runs(state_dir):
            save_report(report, state_dir, raw=path.read_bytes())
        path = stored
    target = name or report.get("spec_name")
    prev = Registry(state_dir).promote(target, report, path)
    click.echo(f"baseline {target!r} -> run {report['run_id']}" + (f" (was {prev})" if prev else " (new)"))


def list_lines(state_dir: Path, spec: str | None = None, tag: str | None = None) -> list[str]:
    """``evalfarm ls``: id, finished, spec, result, path, figures, prompt, baselines (tab-separated)."""
    from .artifacts import list_runs, runs_dir
    from .registry import DB_NAME, Registry

    if not runs_dir(state_dir).is_dir() and not (Path(state_dir) / DB_NAME).is_file():
        return []
    registry = Registry(state_dir)
    names = registry.baseline_names()
    out = []
    for e in registry.runs(spec=spec, tag=tag):
        figures = " ".join(f"{a}={f['overall']:.3f}" if f.get("overall") is not None else f"{a}=n/a"
                           for a, f in (e.get("figures") or {}).items())
        prompt = f"{e['prompt_name']}@{e['prompt_version']}" if e.get("prompt_name") else "-"
        out.append("\t".join([e["run_id"], e.get("finished_at") or "", e.get("spec_name") or "", e["result"],
                              e.get("artifact_path") or "", figures, prompt,
                              ",".join(names.get(e["run_id"], [])) or "-"]))
    if spec is None and tag is None:  # saved files the registry could not read
        known = {e["run_id"] for e in registry.runs()}
        out += [f"{p.stem}\t\t\tUNREADABLE\t{p}" for p in list_runs(state_dir) if p.stem not in known]
    return out


def baseline_lines(state_dir: Path) -> list[str]:
    from .registry import DB_NAME, Registry

    if not (Path(state_dir) / DB_NAME).is_file():
        return []
    return ["\t".join([e["baseline_name"], e["run_id"], e["promoted_at"], e.get("spec_name") or "",
                       e.get("result") or "", e.get("artifact_path") or ""])
            for e in Registry(state_dir).baselines()]


def diff_output(a_ref: str, b_ref: str, tolerance: float, alpha: float, state_dir: Path) -> dict[str, Any]:
    """The diff JSON: per-adapter deltas (diff_reports), the case comparison, the prompts."""
    from .artifacts import load_report
    from .diff import compare_cases, diff_reports
    from .registry import DB_NAME, Registry, resolve_ref

    a, b = load_report(resolve_ref(a_ref, state_dir)), load_report(resolve_ref(b_ref, state_dir))
    result = diff_reports(a, b, tolerance)
    result["cases"] = compare_cases(a, b, alpha)
    prompts = {"a": None, "b": None, "changed_under_same_version": False}
    if (Path(state_dir) / DB_NAME).is_file():
        reg = Registry(state_dir)
        for side, rep in (("a", a), ("b", b)):
            entry = reg.get(rep.get("run_id", ""))
            prompts[side] = entry["prompt"] if entry else None
        pa, pb = prompts["a"], prompts["b"]
        if pa and pb and (pa["name"], pa["version"]) == (pb["name"], pb["version"]) and pa["hash"] != pb["hash"]:
            prompts["changed_under_same_version"] = True
    result["prompts"] = prompts
    return result


def diff_text(result: dict[str, Any]) -> list[str]:
    from .diff import describe_cases

    lines = describe_cases(result["cases"])
    p = result.get("prompts") or {}
    pa, pb = p.get("a"), p.get("b")
    if pa or pb:
        show = lambda x: f"{x['name']}@{x['version']} ({x['hash'][:19]})" if x else "none"  # noqa: E731
        lines.append(f"prompt: a {show(pa)}, b {show(pb)}")
    if p.get("changed_under_same_version"):
        lines.append("WARNING: same prompt version, different content: these runs used different prompts")
    return lines
