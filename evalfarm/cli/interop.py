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
    import tempfile

    from ..runs.report_pass import read_pass
    from ..runs.state import StateDir

    path = resolve_ref(run, state_dir)
    source = str(path)
    blobs = StateDir.of(state_dir).blobs
    with tempfile.TemporaryFile(prefix="evalfarm-export-") as spool:
        def fresh() -> _AtifSink:  # a report read whole after a streamed start begins again
            spool.seek(0)
            spool.truncate()
            return _AtifSink(item_key, blobs, spool)

        # one streamed pass (an edited report is exit 2: runs.trust); each agent item's ATIF document
        # spooled as its outcome goes by, written out only once the whole report's hash is checked
        p = read_pass(path, state_dir, "export", fresh)
        sink = p.sink
        for note in p.trusted.notes:
            click.echo(f"evalfarm: note: {note}", err=True)
        if item_key:
            if sink.matched != 1:
                raise UsageError(f"--item {item_key}: {'no' if not sink.matched else sink.matched} agent items of "
                                 f"{source} match; give a key (or a unique prefix) from `evalfarm export jsonl`")
            sink.document(sink.first)
        if sink.error is not None:
            raise sink.error
        if not sink.docs:
            raise UsageError(f"{source}: no agent item with a stored trajectory (looked in {blobs}; set "
                             "EVALFARM_BLOB_DIR to where the run's agents stored theirs)")
        output.mkdir(parents=True, exist_ok=True)
        spool.seek(0)
        for _ in range(sink.docs):
            name = spool.readline()[:-1].decode("utf-8")
            size = int(spool.readline())
            atomic_write(output / name, spool.read(size))
    click.echo(f"wrote {sink.docs} ATIF trajectories to {output}"
               + (f"; {sink.missing} agent items have none (no parser for their agent, or not stored here)"
                  if sink.missing else ""), err=True)


class _AtifSink:
    """What ``export trajectory`` keeps of a streamed run: each agent item's ATIF document written to
    ``spool`` (its name, its size, its bytes) as the item goes by; with ``--item``, the first matching
    agent item and how many match. A damaged blob is said after the report's own checks (``error``)."""

    def __init__(self, item_key: str | None, blobs: Path, spool: Any) -> None:
        self.item_key, self.blobs, self.spool = item_key, blobs, spool
        self.run_id = ""
        self.matched, self.first = 0, None
        self.docs = self.missing = 0
        self.error: UsageError | None = None

    def start(self, head: dict[str, Any]) -> None:
        self.run_id = str(head.get("run_id"))

    def add(self, o: Any, new: Any = None) -> None:
        if not (isinstance(o, dict) and isinstance(o.get("agent"), dict)):
            return
        if self.item_key:
            if str(o.get("key") or "").startswith(self.item_key):
                self.matched += 1
                if self.matched == 1:
                    self.first = o
            return
        self.document(o)

    def document(self, o: dict[str, Any]) -> None:
        from ..interop.atif import encode, file_name, to_atif

        if self.error is not None:
            return
        sha = str(o["agent"].get("trajectory_sha256") or "")
        path = self.blobs / f"{sha}.trajectory.json"
        if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha) or not path.is_file():
            self.missing += 1
            return
        try:
            trajectory = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.error = UsageError(f"{path}: not a stored trajectory ({exc}); the blob directory is damaged")
            return
        data = encode(to_atif(trajectory, o, self.run_id))
        self.spool.write(file_name(o).encode("utf-8") + b"\n" + str(len(data)).encode() + b"\n" + data)
        self.docs += 1


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
    import tempfile
    from importlib.metadata import PackageNotFoundError, version

    from ..interop.inspect_log import INSPECT_NAME, file_name
    from ..runs.report_pass import read_pass

    try:
        ev_version = version("evalfarm")
    except PackageNotFoundError:
        ev_version = ""
    path = resolve_ref(run, state_dir)
    source = str(path)
    to_dir = output.is_dir()
    sinks: list[_InspectSink] = []

    def fresh() -> _InspectSink:  # a report read whole after a streamed start begins again
        while sinks:
            sinks.pop().close()
        sinks.append(_InspectSink(adapter, to_dir, spec_path, state_dir, ev_version))
        return sinks[-1]

    try:
        # one streamed pass (an edited report is exit 2: runs.trust): each sample spooled as its outcome
        # goes by, with its input looked up in the prompts section read in step; the log's head (results,
        # model usage, sample ids) made after it, and the first byte written once the hash is checked
        p = read_pass(path, state_dir, "export", fresh)
        sink = p.sink
        for note in p.trusted.notes:
            click.echo(f"evalfarm: note: {note}", err=True)
        adapters = list(sink.adapters)
        if not adapters:
            raise UsageError(f"{source}: the run has no adapters and no items; nothing to export")
        if adapter is not None and adapter not in adapters:
            raise UsageError(f"--adapter {adapter!r}: not in this run (adapters: {', '.join(adapters)})")
        chosen = [adapter] if adapter else adapters
        if len(chosen) > 1 and not to_dir:
            raise UsageError(f"the run has {len(chosen)} adapters ({', '.join(chosen)}): pass --adapter ID, or "
                             "-o an existing folder for one log per adapter")
        if sink.spec_error is not None:
            raise sink.spec_error
        written = []
        for name in chosen:  # every log's samples spooled before the first is written
            log = sink.writer(name)
            inspect_name = file_name(log.head())
            target = output / inspect_name if to_dir else output
            write_stream(target, log.chunks())
            written.append(str(target))
    finally:
        while sinks:
            sinks.pop().close()
    click.echo("\n".join(written))
    if not to_dir and not INSPECT_NAME.match(output.name):
        click.echo(f"evalfarm: note: `inspect view` and `inspect log list` show only logs named like "
                   f"{inspect_name} (a timestamp first); -o an existing folder names it so",
                   err=True)


def _trajectory(o: dict[str, Any], blobs: Path) -> dict[str, Any] | None:
    """An agent item's stored trajectory (the blob directory: the state dir's blobs, or
    EVALFARM_BLOB_DIR); None when it has none here, or it is unreadable."""
    agent = o.get("agent")
    sha = str(agent.get("trajectory_sha256") or "") if isinstance(agent, dict) else ""
    if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
        return None
    try:
        data = json.loads((blobs / f"{sha}.trajectory.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _input_of(index: int, p: Any) -> dict[str, Any] | None:
    """A prompt of the report's prompts section (each prompt as sent) as a sample's input."""
    if not (isinstance(p, dict) and isinstance(p.get("id"), str)):
        return None
    return {"text": p.get("text", ""), "system": p.get("system"),
            "target": list(p.get("expected_output_contains") or []) or ""}


class _InspectSink:
    """What ``export inspect`` keeps of a streamed run: the adapters seen, and for each adapter to
    export a ``LogWriter`` spooling its samples to a temporary file. The inputs come from ``--spec``
    (read on ``start``; a problem with it is said after the report's own checks) or from the report's
    prompts section (``lookup``: ``runs.report_pass`` sets ``prompt_of``)."""

    def __init__(self, adapter: str | None, to_dir: bool, spec_path: Path | None, state_dir: Path,
                 ev_version: str) -> None:
        from ..interop.inspect_log import SampleIds
        from ..runs.state import StateDir

        self.adapter, self.to_dir, self.spec_path, self.ev_version = adapter, to_dir, spec_path, ev_version
        self.blobs = StateDir.of(state_dir).blobs
        self.lookup = None if spec_path else _input_of
        self.prompt_of: Any = None
        self.spec_prompts: dict[str, dict[str, Any]] | None = None
        self.specs: dict[str, dict] = {}
        self.spec_error: Exception | None = None
        self.head: dict[str, Any] = {}
        self.adapters: dict[str, None] = {}
        self.writers: dict[str, Any] = {}
        self.ids = SampleIds()
        self.skip = False

    def start(self, head: dict[str, Any]) -> None:
        self.head = head
        self.adapters = dict.fromkeys(head.get("adapters") or [])
        if self.spec_path is not None:
            try:
                self.spec_prompts, self.specs = _from_spec(self.spec_path, head)
            except EvalfarmError as exc:
                self.spec_error = exc
        # with several adapters and -o a file (no --adapter), the command stops after the pass: no samples
        self.skip = self.spec_error is not None or (self.adapter is None and not self.to_dir and len(self.adapters) > 1)

    def add(self, o: dict[str, Any], new: Any = None) -> None:
        name = o["adapter"]
        if name not in self.adapters:
            self.adapters[name] = None
            self.skip = self.skip or (self.adapter is None and not self.to_dir and len(self.adapters) > 1)
        if self.skip or (self.adapter is not None and name != self.adapter):
            return
        if self.spec_prompts is not None:
            prompt = self.spec_prompts.get(o["prompt_id"])
        else:
            prompt = self.prompt_of(o["prompt_id"]) if self.prompt_of is not None else None
        self.writer(name).add(o, prompt, _trajectory(o, self.blobs))

    def writer(self, name: str) -> Any:
        """The adapter's log (made empty for an adapter without outcomes)."""
        import tempfile

        from ..interop.inspect_log import LogWriter

        if name not in self.writers:
            spool = tempfile.TemporaryFile(prefix="evalfarm-inspect-")
            self.writers[name] = LogWriter(self.head, name, spool, self.ids,
                                           self.spec_prompts is not None or self.prompt_of is not None,
                                           self.specs.get(name), self.ev_version)
        return self.writers[name]

    def close(self) -> None:
        for w in self.writers.values():
            w.spool.close()
        self.ids.close()


def _from_spec(spec_path: Path, report: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict]]:
    """The inputs and targets of the spec's prompts by id, and its adapters' entries by id."""
    spec_file = open_spec(spec_path)
    spec = spec_file.spec
    if report.get("spec_name") and spec.name != report["spec_name"]:
        raise UsageError(f"--spec {spec_path}: spec {spec.name!r} is not this run's spec "
                         f"({report['spec_name']!r})")
    prompts = {}
    for p in spec_file.source:
        prompts[p.id] = {"text": p.text, "system": p.system, "target": list(p.expected_output_contains) or ""}
    adapters = {a.id: a.model_dump(mode="json") for a in spec.adapters if not isinstance(a, str)}
    return prompts, adapters


__all__ = ["import_cmd", "export_cmd"]
