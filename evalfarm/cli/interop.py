"""``evalfarm import promptfoo`` and ``evalfarm export inspect|jsonl|csv``: thin click commands.

Nothing is written unless the whole output is valid: an imported spec is validated with
evalfarm's own ``load_spec`` before it is renamed into place; an export checks every field of
the (untrusted) report before its first byte goes out.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import yaml

from ..runs.archive import atomic_write, write_stream
from ..runs.registry import resolve_ref
from .options import state_dir_option
from ..errors import EvalfarmError, SpecError, UsageError
from ..spec.load import load_spec, open_spec


# ---- import ------------------------------------------------------------------------------------
@click.group("import")
def import_cmd() -> None:
    """Import another tool's eval config as an evalfarm spec."""


def _spec_yaml(spec: dict[str, Any], source: Path) -> str:
    header = f"# imported from {source.name} by 'evalfarm import promptfoo'\n"
    return header + yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=100)


def _validated(text: str) -> None:
    """Validate the spec text with evalfarm's own loader (the spec names no relative files)."""
    with tempfile.TemporaryDirectory(prefix="evalfarm-import-") as folder:
        path = Path(folder) / "spec.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            load_spec(path)
        except SpecError as exc:
            raise EvalfarmError(f"the imported spec does not validate ({exc.message}, field "
                                f"{exc.field or '?'}); nothing written") from None


@import_cmd.command("promptfoo")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the spec here (default: stdout).")
@click.option("--skip-unsupported", is_flag=True,
              help="Drop what has no faithful evalfarm equivalent (listed on stderr) instead of stopping.")
def import_promptfoo(config: Path, output: Path | None, skip_unsupported: bool) -> None:
    """Import a promptfoo config (promptfooconfig.yaml) as an evalfarm spec.

    Providers become adapters (OpenAI and OpenAI-compatible services, anthropic:messages, google:
    and vertex: Gemini, openai:responses, azure:chat, the http provider's JSON form); each (prompt,
    test) pair a prompt with its vars substituted; assertions checks (contains, icontains, equals,
    regex, is-json, contains-json, starts-with, contains/icontains-all/-any, their not- forms; cost,
    latency, similar) or judge criteria (llm-rubric).
    Anything else is listed with its file and line, and the import stops (exit 2) unless
    --skip-unsupported.
    """
    from ..interop.promptfoo import import_config

    if not config.is_file():
        raise UsageError(f"{config}: no such file")
    result = import_config(config)
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    for finding in result.refused:
        echo(f"evalfarm: {'skipped' if skip_unsupported else 'error'}: {finding}")
    for finding in result.caveats:
        echo(f"evalfarm: note: {finding}")
    if result.refused and not skip_unsupported:
        raise EvalfarmError(f"{config}: {len(result.refused)} unsupported feature(s) listed above; nothing "
                            "written (--skip-unsupported drops them)")
    spec = result.spec
    if not spec["adapters"]:
        raise EvalfarmError(f"{config}: no provider could be imported; nothing written")
    if not spec["prompts"]:
        raise EvalfarmError(f"{config}: no prompt could be imported; nothing written")
    text = _spec_yaml(spec, config)
    _validated(text)
    if output is not None:
        if output.is_dir():
            raise UsageError(f"-o {output}: is a directory; give a file path")
        atomic_write(output, text.encode("utf-8"))
    else:
        click.echo(text, nl=False)
    mapped = ", ".join(f"{k} {v}" for k, v in sorted(result.mapped.items())) or "none"
    refused = ", ".join(f"{k} {v}" for k, v in sorted(result.refused_types.items())) or "none"
    echo(f"evalfarm: imported {len(spec['prompts'])} prompt(s) x {len(spec['adapters'])} adapter(s) from "
         f"{config}{f' to {output}' if output else ''}; assertions mapped: {mapped}; refused: {refused}")


# ---- export ------------------------------------------------------------------------------------
@click.group("export")
def export_cmd() -> None:
    """Export a stored run in another tool's format."""


def _report(run: str, state_dir: Path) -> tuple[dict[str, Any], str]:
    """The stored run, every field checked by the one report validation (core.report) on load."""
    from ..runs.trust import load_trusted

    path = resolve_ref(run, state_dir)
    trusted = load_trusted(path, state_dir, "export")  # an edited report is exit 2 (runs.trust)
    for note in trusted.notes:
        click.echo(f"evalfarm: note: {note}", err=True)
    return trusted.report, str(path)


def _export_rows(run: str, output: Path | None, state_dir: Path, fmt: str) -> None:
    """The run's rows, written as its report is streamed (``runs.report_pass``) into a spool file: the
    first byte goes out only once the whole report's hash is checked."""
    import tempfile

    from ..interop.rows import RowWriter
    from ..runs.report_pass import read_pass

    path = resolve_ref(run, state_dir)
    with tempfile.TemporaryFile(prefix="evalfarm-export-") as spool:
        def fresh() -> RowWriter:  # a report read whole after a streamed start begins again
            spool.seek(0)
            spool.truncate()
            return RowWriter(spool, fmt)

        p = read_pass(path, state_dir, "export", fresh)  # an edited report is exit 2 (runs.trust)
        p.sink.flush()
        for note in p.trusted.notes:
            click.echo(f"evalfarm: note: {note}", err=True)
        spool.seek(0)
        _emit(iter(lambda: spool.read(1 << 20), b""), output)


def _emit(chunks, output: Path | None) -> None:
    if output is None:
        out = sys.stdout.buffer
        try:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
        except BrokenPipeError:  # `... | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
    else:
        if output.is_dir():
            raise UsageError(f"-o {output}: is a directory; give a file path")
        write_stream(output, chunks)


_output_option = click.option("-o", "--output", type=click.Path(path_type=Path),
                              help="Write here (default: stdout); written whole or not at all.")


@export_cmd.command("jsonl")
@click.argument("run")
@_output_option
@state_dir_option
def export_jsonl(run: str, output: Path | None, state_dir: Path) -> None:
    """One JSON object per item (RUN: a report path, run id, id prefix or baseline:NAME)."""
    _export_rows(run, output, state_dir, "jsonl")


@export_cmd.command("csv")
@click.argument("run")
@_output_option
@state_dir_option
def export_csv(run: str, output: Path | None, state_dir: Path) -> None:
    """One CSV row per item, with a header; text that looks like a formula is prefixed with '."""
    _export_rows(run, output, state_dir, "csv")


@export_cmd.command("trajectory")
@click.argument("run")
@click.option("--item", "item_key", help="One item (its key, or a unique prefix of it); default: every agent item.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="A folder: one ATIF JSON file per agent item (made if missing).")
@state_dir_option
def export_trajectory(run: str, item_key: str | None, output: Path, state_dir: Path) -> None:
    """Each agent item's trajectory as Harbor's ATIF v1.4 JSON (one file per item). Trajectories are read
    from the blob directory (the state dir's blobs, or EVALFARM_BLOB_DIR)."""
    from ..interop.atif import encode, file_name, to_atif
    from ..runs.state import StateDir

    report, source = _report(run, state_dir)
    blobs = StateDir.of(state_dir).blobs
    items = [o for o in report.get("outcomes") or [] if isinstance(o, dict) and isinstance(o.get("agent"), dict)]
    if item_key:
        items = [o for o in items if str(o.get("key") or "").startswith(item_key)]
        if len(items) != 1:
            raise UsageError(f"--item {item_key}: {'no' if not items else len(items)} agent items of {source} match; "
                             "give a key (or a unique prefix) from `evalfarm export jsonl`")
    docs, missing = [], []
    for o in items:
        sha = str(o["agent"].get("trajectory_sha256") or "")
        path = blobs / f"{sha}.trajectory.json"
        if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha) or not path.is_file():
            missing.append(str(o.get("key"))[:12])
            continue
        try:
            trajectory = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not a stored trajectory ({exc}); the blob directory is damaged") from None
        docs.append((file_name(o), encode(to_atif(trajectory, o, str(report.get("run_id"))))))
    if not docs:
        raise UsageError(f"{source}: no agent item with a stored trajectory (looked in {blobs}; set "
                         "EVALFARM_BLOB_DIR to where the run's agents stored theirs)")
    output.mkdir(parents=True, exist_ok=True)
    for name, data in docs:
        atomic_write(output / name, data)
    click.echo(f"wrote {len(docs)} ATIF trajectories to {output}"
               + (f"; {len(missing)} agent items have none (no parser for their agent, or not stored here)"
                  if missing else ""), err=True)


@export_cmd.command("inspect")
@click.argument("run")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="The log file (.json), or an existing folder for one log per adapter.")
@click.option("--adapter", help="Which adapter's log (an Inspect log holds one model); needed when the run has "
                                "several and -o is a file.")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The run's spec: inputs and targets from it instead of the report's prompts section "
                   "(for reports written before reports carried one).")
@state_dir_option
def export_inspect(run: str, output: Path, adapter: str | None, spec_path: Path | None, state_dir: Path) -> None:
    """An Inspect AI eval log (JSON) that inspect_ai.log.read_eval_log reads: samples with input,
    messages, output, scores and model usage; results with metrics; status success, error or
    cancelled. Into a folder, each log is named as Inspect names its own
    (YYYY-MM-DDTHH-MM-SS..._TASK_ADAPTER_ID.json), so `inspect view` and `inspect log list` list it."""
    from importlib.metadata import PackageNotFoundError, version

    from ..interop.inspect_log import INSPECT_NAME, eval_log, file_name

    report, source = _report(run, state_dir)
    adapters = list(dict.fromkeys((report.get("adapters") or []) + [o["adapter"] for o in report["outcomes"]]))
    if not adapters:
        raise UsageError(f"{source}: the run has no adapters and no items; nothing to export")
    if adapter is not None and adapter not in adapters:
        raise UsageError(f"--adapter {adapter!r}: not in this run (adapters: {', '.join(adapters)})")
    chosen = [adapter] if adapter else adapters
    to_dir = output.is_dir()
    if len(chosen) > 1 and not to_dir:
        raise UsageError(f"the run has {len(chosen)} adapters ({', '.join(chosen)}): pass --adapter ID, or "
                         "-o an existing folder for one log per adapter")
    prompts, specs = _from_spec(spec_path, report) if spec_path else (_from_report(report), {})
    try:
        ev_version = version("evalfarm")
    except PackageNotFoundError:
        ev_version = ""
    written = []
    logs = []
    trajectories = _trajectories(report, state_dir)
    for name in chosen:
        log = eval_log(report, name, prompts, specs.get(name), ev_version, trajectories)
        target = output / file_name(log) if to_dir else output
        logs.append((target, (json.dumps(log, ensure_ascii=False, allow_nan=False, indent=1) + "\n").encode()))
    for target, body in logs:  # every log built before the first is written
        atomic_write(target, body)
        written.append(str(target))
    click.echo("\n".join(written))
    if not to_dir and not INSPECT_NAME.match(output.name):
        click.echo(f"evalfarm: note: `inspect view` and `inspect log list` show only logs named like "
                   f"{file_name(log)} (a timestamp first); -o an existing folder names it so",
                   err=True)


def _trajectories(report: dict[str, Any], state_dir: Path) -> dict[str, dict[str, Any]]:
    """Agent items' stored trajectories by item key (the blob directory: the state dir's blobs, or
    EVALFARM_BLOB_DIR); an item whose trajectory is not here, or unreadable, has none."""
    from ..runs.state import StateDir

    blobs = StateDir.of(state_dir).blobs
    out = {}
    for o in report.get("outcomes") or []:
        agent = o.get("agent") if isinstance(o, dict) else None
        sha = str((agent or {}).get("trajectory_sha256") or "") if isinstance(agent, dict) else ""
        if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
            continue
        try:
            data = json.loads((blobs / f"{sha}.trajectory.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out[str(o.get("key"))] = data
    return out


def _from_report(report: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The inputs the report recorded (its ``prompts`` section: each prompt as sent); None for an
    older report without one (then samples say the input was not stored)."""
    recorded = report.get("prompts")
    if not recorded:
        return None
    return {p["id"]: {"text": p.get("text", ""), "system": p.get("system"),
                      "target": list(p.get("expected_output_contains") or []) or ""}
            for p in recorded if isinstance(p, dict) and isinstance(p.get("id"), str)}


def _from_spec(spec_path: Path, report: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict]]:
    spec_file = open_spec(spec_path)
    spec = spec_file.spec
    if report.get("spec_name") and spec.name != report["spec_name"]:
        raise UsageError(f"--spec {spec_path}: spec {spec.name!r} is not this run's spec "
                         f"({report['spec_name']!r})")
    wanted = {o["prompt_id"] for o in report["outcomes"]}
    prompts = {}
    for p in spec_file.source:
        if p.id in wanted:
            prompts[p.id] = {"text": p.text, "system": p.system,
                             "target": list(p.expected_output_contains) or ""}
    adapters = {a.id: a.model_dump(mode="json") for a in spec.adapters if not isinstance(a, str)}
    return prompts, adapters


__all__ = ["import_cmd", "export_cmd"]
