"""`evalfarm export inspect|jsonl|csv`: a real run against a real mock-provider, exported by the real
CLI, read back by Inspect AI's own reader and by pandas; damaged reports are one line, exit 2."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from providers_fixture import MockProviderProc

INSPECT_VERSION = "0.3.285"


def spec_text(url: str) -> str:
    return yaml.safe_dump({
        "name": "export-demo",
        "adapters": [
            {"id": "small", "model": "m-small", "base_url": url, "params": {"temperature": 0},
             "price": {"input": 1.0, "output": 2.0}},
            {"id": "large", "model": "m-large", "base_url": url}],
        "judge": {"model": "j-1", "base_url": url, "price": {"input": 0.5, "output": 0.5}},
        "trials": 2,
        "prompts": [
            {"id": "hello", "text": "Say hello world", "system": "Be brief.", "expected_output_contains": ["hello"],
             "criteria": [{"id": "polite", "description": "is polite"}]},
            {"id": "formula", "text": '[[reply:=HYPERLINK("http://x", "a, ""b""")]]',
             "checks": [{"kind": "contains", "value": "=HYPER"}]},
            {"id": "-minus", "text": "[[reply:+1 and @you]]", "checks": [{"kind": "contains", "value": "nope"}]},
            {"id": "broken", "text": "[[status:401]] never"},
            {"id": "judged-fail", "text": "Answer [[fail-criterion:polite]]",
             "criteria": [{"id": "polite", "description": "is polite"}]},
        ],
    }, sort_keys=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real run: 5 prompts x 2 adapters x 2 trials, a judge, a failing check, errored items."""
    tmp = tmp_path_factory.mktemp("export")
    mock = MockProviderProc()
    try:
        spec = tmp / "spec.yaml"
        spec.write_text(spec_text(mock.url))
        proc = run_cli("run", str(spec), "--state-dir", str(tmp / "st"), "-o", str(tmp / "report.json"), "--json")
        assert proc.returncode in (0, 1), proc.stderr
    finally:
        mock.stop()
    report = json.loads((tmp / "report.json").read_text())
    assert len(report["outcomes"]) == 20
    return tmp, spec, report


def test_inspect_reads_the_exported_log_back(run):
    import inspect_ai
    from inspect_ai.log import read_eval_log

    assert inspect_ai.__version__ == INSPECT_VERSION
    tmp, spec, report = run
    out = tmp / "small.json"
    proc = run_cli("export", "inspect", str(tmp / "report.json"), "--adapter", "small", "--spec", str(spec),
                   "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    log = read_eval_log(str(out))
    assert log.status == "success" and log.version == 2 and log.error is None
    assert log.eval.task == "export-demo" and log.eval.model == "openai/m-small" and log.eval.run_id == report["run_id"]
    assert log.eval.config.epochs == 2 and log.eval.model_generate_config.temperature == 0
    ours = {(o["prompt_id"], o["trial"] + 1): o for o in report["outcomes"] if o["adapter"] == "small"}
    assert len(log.samples) == len(ours) == 10
    assert log.eval.dataset.samples == 5
    prompts = {p["id"]: p for p in yaml.safe_load(spec.read_text())["prompts"]}
    for sample in log.samples:
        o = ours[(sample.id, sample.epoch)]
        user = [m for m in sample.messages if m.role == "user"][0]
        assert user.text == prompts[sample.id]["text"]
        if sample.id == "hello":
            assert sample.messages[0].role == "system" and sample.messages[0].text == "Be brief."
            assert sample.target == ["hello"]
        if o["error"]:
            assert sample.scores is None and "AuthError" in sample.error.message
            assert sample.output.completion == "" and sample.output.error
            continue
        assert sample.error is None
        assert sample.output.completion == o["output"] and sample.messages[-1].text == o["output"]
        assert sample.output.choices[0].stop_reason == "stop"
        assert sample.scores["checks"].value == ("C" if o["golden_passed"] else "I")
        assert sample.scores["verdict"].value == ("C" if o["passed"] else "I")
        assert sample.scores["judge"].value == o["judge_score"]
        usage = sample.model_usage["openai/m-small"]
        assert (usage.input_tokens, usage.output_tokens) == (o["input_tokens"], o["output_tokens"])
        assert math.isclose(usage.total_cost, o["cost_usd"])
        judge = sample.model_usage["openai/j-1"]
        assert (judge.input_tokens, judge.output_tokens) == (o["judge_input_tokens"], o["judge_output_tokens"])
    assert {s.id for s in log.samples if s.scores and s.scores["verdict"].value == "I"} == {"-minus", "judged-fail"}
    figures = report["per_adapter"]["small"]
    metrics = {s.name: {k: m.value for k, m in s.metrics.items()} for s in log.results.scores}
    assert math.isclose(metrics["checks"]["accuracy"], figures["golden_pass_rate"], abs_tol=1e-6)
    assert math.isclose(metrics["verdict"]["accuracy"], figures["pass_rate"], abs_tol=1e-6)
    assert math.isclose(metrics["judge"]["mean"], figures["judge_mean"], abs_tol=1e-6)
    assert metrics["verdict"]["pass^2"] == figures["pass_k"]["rate"]
    assert log.results.total_samples == 10 and log.results.completed_samples == 8
    totals = log.stats.model_usage
    assert (totals["openai/m-small"].input_tokens, totals["openai/m-small"].output_tokens) == \
        (figures["tokens_in"], figures["tokens_out"])
    assert totals["openai/j-1"].input_tokens == figures["judge_tokens_in"]
    assert math.isclose(totals["openai/m-small"].total_cost, figures["cost_usd"])
    _every_field_known(json.loads(out.read_text()), json.loads(log.model_dump_json()), "")
    header = read_eval_log(str(out), header_only=True)  # Inspect's streaming header reader
    assert header.samples is None and header.status == "success" and len(header.results.scores) == 3


def _every_field_known(ours, theirs, path: str) -> None:
    """Inspect's models ignore unknown fields: every field we wrote must survive its round trip."""
    if isinstance(ours, dict):
        for key, value in ours.items():
            assert isinstance(theirs, dict) and key in theirs, f"Inspect dropped {path}.{key}"
            _every_field_known(value, theirs[key], f"{path}.{key}")
    elif isinstance(ours, list):
        assert isinstance(theirs, list) and len(theirs) == len(ours), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _every_field_known(a, b, f"{path}[{i}]")


def test_one_log_per_adapter_by_run_id_and_adapter_choice(run, tmp_path):
    from inspect_ai.log import read_eval_log

    tmp, _, report = run
    state = tmp / "st"
    folder = tmp_path / "logs"
    folder.mkdir()
    proc = run_cli("export", "inspect", report["run_id"][:20], "--state-dir", str(state), "-o", str(folder))
    assert proc.returncode == 0, proc.stderr
    files = sorted(folder.iterdir(), key=lambda f: f.name.split("_")[2])  # by adapter: large, small
    # named as Inspect names its own logs: {created}_{task}_{model}_{id}.json, the created time first
    stamp = report["started_at"][:19].replace(":", "-")
    assert [f.name.split("_")[:3] for f in files] == [[f"{stamp}-00-00", "export-demo", a] for a in ("large", "small")]
    assert len({f.name.split("_")[3] for f in files}) == 2
    logs = [read_eval_log(str(f)) for f in files]
    assert [lg.eval.run_id for lg in logs] == [report["run_id"]] * 2  # our run id, inside
    assert [lg.eval.metadata["evalfarm"]["run_id"] for lg in logs] == [report["run_id"]] * 2
    assert [lg.eval.model for lg in logs] == ["large", "small"]  # without --spec: the adapter ids
    assert all(len(lg.samples) == 10 for lg in logs)
    # without --spec the inputs come from the report's prompts section (each prompt as it was sent)
    sent = {p["id"]: p["text"] for p in report["prompts"]}
    for sample in logs[0].samples:
        text = sample.input if isinstance(sample.input, str) else sample.input[-1].content
        assert text == sent[sample.id], sample.id

    to_file = tmp_path / "one.json"
    ambiguous = run_cli("export", "inspect", report["run_id"], "--state-dir", str(state), "-o", str(to_file))
    assert ambiguous.returncode == 2 and not to_file.exists()
    assert ambiguous.stderr.strip().splitlines() == [
        "evalfarm: error: the run has 2 adapters (small, large): pass --adapter ID, or -o an existing folder for "
        "one log per adapter"]
    unknown = run_cli("export", "inspect", report["run_id"], "--state-dir", str(state), "--adapter", "nope",
                      "-o", str(to_file))
    assert unknown.returncode == 2 and "not in this run" in unknown.stderr and not to_file.exists()


def test_inspect_log_list_finds_the_export_with_its_samples_scores_and_judge_explanations(run, tmp_path):
    """Inspect's own CLI, not only its reader: `inspect log list` lists only logs named with a timestamp
    first (a file named after our run id was invisible to it and to `inspect view`)."""
    import shutil
    import subprocess
    import sys

    tmp, _, report = run
    folder = tmp_path / "logs"
    folder.mkdir()
    proc = run_cli("export", "inspect", report["run_id"], "--state-dir", str(tmp / "st"), "-o", str(folder))
    assert proc.returncode == 0, proc.stderr
    inspect = shutil.which("inspect", path=str(Path(sys.executable).parent)) or pytest.fail("inspect CLI missing")
    listed = subprocess.run([inspect, "log", "list", "--log-dir", str(folder), "--json"], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert sorted(Path(e["name"]).name for e in entries) == sorted(f.name for f in folder.iterdir())
    assert {e["task"] for e in entries} == {"export-demo"} and all(e["task_id"] for e in entries)
    print("\nFIGURES inspect log list --json:", json.dumps(entries)[:1500])
    from inspect_ai.log import read_eval_log

    small = read_eval_log(next(e["name"] for e in entries if "_small_" in e["name"]))
    assert len(small.samples) == 10 and small.eval.run_id == report["run_id"]
    judged = [s for s in small.samples if s.scores and "judge" in s.scores]
    assert judged and all(s.scores["judge"].explanation for s in judged)  # the judge's reasons travel
    ours = {(o["prompt_id"], o["trial"] + 1): o for o in report["outcomes"] if o["adapter"] == "small"}
    for s in judged:
        o = ours[(s.id, s.epoch)]
        if o["judge_reason"]:
            assert s.scores["judge"].explanation == o["judge_reason"]
        else:  # a weighted rubric: one line per criterion, with its verdict and reason
            assert o["judge_criteria"]
            for c in o["judge_criteria"]:
                assert f"{c['id']}: {c['verdict']}" in s.scores["judge"].explanation and c["reason"] in \
                    s.scores["judge"].explanation
        assert s.scores["checks"].answer == s.output.completion
        assert s.scores["checks"].value in ("C", "I") and s.scores["verdict"].value in ("C", "I")
    # a file name of the user's own choosing is written as given, with a note on how Inspect lists logs
    own = run_cli("export", "inspect", report["run_id"], "--adapter", "small", "--state-dir", str(tmp / "st"),
                  "-o", str(tmp_path / "mine.json"))
    assert own.returncode == 0 and (tmp_path / "mine.json").exists()
    assert "show only logs named like" in own.stderr
    named = tmp_path / "2026-12-01T18-29-21-00-00_mine.json"
    quiet = run_cli("export", "inspect", report["run_id"], "--adapter", "small", "--state-dir", str(tmp / "st"),
                    "-o", str(named))
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_status_error_and_cancelled(run, tmp_path):
    from inspect_ai.log import read_eval_log

    tmp, _, report = run
    nothing = dict(report, nothing_measured=True, thresholds_passed=False)
    stopped = dict(report, stopped="budget")
    for name, data, status in (("nothing", nothing, "error"), ("stopped", stopped, "cancelled")):
        src = tmp_path / f"{name}.json"
        src.write_text(json.dumps(data))
        out = tmp_path / f"{name}.log.json"
        proc = run_cli("export", "inspect", str(src), "--adapter", "large", "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        log = read_eval_log(str(out))
        assert log.status == status
        if status == "error":
            assert "nothing was measured" in log.error.message


def test_jsonl_and_csv_rows_for_pandas_and_spreadsheets(run, tmp_path):
    import pandas as pd

    tmp, _, report = run
    jsonl = run_cli("export", "jsonl", str(tmp / "report.json"))
    assert jsonl.returncode == 0, jsonl.stderr
    frame = pd.read_json(io.StringIO(jsonl.stdout), lines=True)
    assert len(frame) == 20
    by_key = {(o["adapter"], o["prompt_id"], o["trial"]): o for o in report["outcomes"]}
    for row in json.loads("[" + ",".join(jsonl.stdout.splitlines()) + "]"):
        o = by_key[(row["adapter"], row["prompt_id"], row["trial"])]
        assert row["run_id"] == report["run_id"] and row["output"] == o["output"]
        assert (row["passed"], row["judge_score"], row["input_tokens"], row["cost_usd"]) == \
            (o["passed"], o["judge_score"], o["input_tokens"], o["cost_usd"])
        assert row["error_class"] == (o["error"]["class"] if o["error"] else None)
    assert frame["cost_usd"].sum() == pytest.approx(report["cost"]["model_usd"])
    assert int(frame["error_class"].notna().sum()) == 4

    out = tmp_path / "rows.csv"
    proc = run_cli("export", "csv", str(tmp / "report.json"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out, keep_default_na=False)
    assert len(table) == 20 and list(table.columns)[:4] == ["run_id", "adapter", "prompt_id", "trial"]
    assert table["input_tokens"].sum() == sum(o["input_tokens"] for o in report["outcomes"])
    cells = list(csv.DictReader(out.open(newline="")))
    formula = [c for c in cells if c["prompt_id"] == "formula"][0]
    assert formula["output"] == "'" + '=HYPERLINK("http://x", "a, ""b""")'  # quoted, commas and quotes intact
    minus = [c for c in cells if c["prompt_id"] == "'-minus"][0]  # the id itself looks like a formula
    assert minus["output"] == "'+1 and @you" and minus["passed"] == "false"
    assert not any(v.startswith(("=", "+", "-", "@")) for c in cells for v in c.values())


def _tampered(report: dict, tmp: Path, name: str, change) -> Path:
    data = json.loads(json.dumps(report))
    change(data)
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("name,change,expected", [
    ("trial", lambda d: d["outcomes"][3].update(trial="x"), "outcomes[3].trial: expected an integer >= 0, got a string"),
    ("passed", lambda d: d["outcomes"][0].update(passed="yes"), "outcomes[0].passed: expected true, false or null"),
    ("output", lambda d: d["outcomes"][5].update(output=5), "outcomes[5].output: expected a string or null"),
    ("error", lambda d: d["outcomes"][1].update(error="boom"), "outcomes[1].error: expected null or an object"),
    ("tokens", lambda d: d["outcomes"][2].update(input_tokens=-3), "outcomes[2].input_tokens: expected a whole number >= 0 or null"),
    ("checks", lambda d: d["outcomes"][2].update(checks=[{"kind": 1}]), "outcomes[2].checks[0].kind: expected a string or null"),
    ("outcomes", lambda d: d.update(outcomes={"a": 1}), "outcomes is not a list of items"),
    ("schema", lambda d: d.update(schema="other/1"), "schema is 'other/1'"),
    ("adapters", lambda d: d.update(adapters=[1]), "adapters: expected a list of strings"),
    ("trials", lambda d: d.update(trials="2"), "trials: expected a whole number >= 1"),
    ("judge", lambda d: d.update(judge="j-1"), "judge: expected an object or null"),
])
def test_damaged_reports_are_one_line_exit_2(run, tmp_path, name, change, expected):
    _, _, report = run
    bad = _tampered(report, tmp_path, name, change)
    for fmt in ("jsonl", "csv", "inspect"):
        out = tmp_path / f"out.{fmt}"
        args = ["export", fmt, str(bad), "-o", str(out)] + (["--adapter", "small"] if fmt == "inspect" else [])
        proc = run_cli(*args)
        assert proc.returncode == 2, (fmt, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("evalfarm: error: ") and expected in lines[0], (fmt, lines)
        assert not out.exists() and proc.stdout == ""


def test_nan_and_unreadable_reports(run, tmp_path):
    _, _, report = run
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(report).replace('"judge_score": 1.0', '"judge_score": NaN', 1))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    for path, expected in ((nan, "judge_score: expected a number or null"), (garbage, "not a readable evalfarm report"),
                           (tmp_path / "nope", "run 'nope' not found")):
        proc = run_cli("export", "jsonl", str(path) if path.name != "nope" else "nope", "--state-dir", str(tmp_path))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0] and proc.stdout == "", lines
