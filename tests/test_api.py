"""The Python API with plain synchronous callables, and persistence."""
from __future__ import annotations

import json
from pathlib import Path

from evalfarm import Runner, load_spec, save_report
from evalfarm.canonical import sha256_hex
from evalfarm.core.report.markdown import render_markdown

SPEC = """\
name: api
lineage_tag: api-tag
adapters: [mock, "mock:other"]
prompts:
  - id: hello
    text: say hello world
    expected_output_contains: [hello world]
  - id: num
    text: a number
    expected_output_regex: "\\\\d"
judge:
  model: m
  provider: mock
  weight: 0.5
thresholds:
  golden_pass_rate_min: 0.9
"""


def write(tmp: Path) -> Path:
    (tmp / "spec.yaml").write_text(SPEC)
    return tmp / "spec.yaml"


def test_runner_with_callables(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path))
    calls = []

    def executor(adapter, prompt):
        calls.append((adapter, prompt.id))
        return "hello world 7" if adapter == "mock" else "nope"

    def judge(judge_spec, prompt, output):
        return 2.0 if "hello" in output else -1  # clamped to [0, 1]

    report = Runner(executor=executor, judge=judge).run(spec, base_dir=tmp_path)
    assert sorted(calls) == [("mock", "hello"), ("mock", "num"), ("mock:other", "hello"), ("mock:other", "num")]
    assert report.per_adapter["mock"]["golden_pass_rate"] == 1.0
    assert report.per_adapter["mock"]["judge_mean"] == 1.0
    assert report.per_adapter["mock:other"]["golden_pass_rate"] == 0.0
    assert report.per_adapter["mock:other"]["judge_mean"] == 0.0
    assert report.thresholds_passed is False
    assert report.threshold_failures == ["mock:other: golden_pass_rate 0.0000 < 0.9"]
    assert len(report.outcomes) == 4 and report.exit_code == 1


def test_default_runner_is_the_mock(tmp_path: Path) -> None:
    report = Runner().run(load_spec(write(tmp_path)), base_dir=tmp_path)
    out = {(o["adapter"], o["prompt_id"]): o["output"] for o in report.outcomes}
    assert out == {("mock", "hello"): "[mock] say hello world", ("mock", "num"): "[mock] a number",
                   ("mock:other", "hello"): "[mock:other] say hello world",
                   ("mock:other", "num"): "[mock:other] a number"}


def test_all_errored_is_nothing_measured(tmp_path: Path) -> None:
    def broken(adapter, prompt):
        raise TimeoutError("read timed out")

    report = Runner(executor=broken).run(load_spec(write(tmp_path)), base_dir=tmp_path)
    assert report.nothing_measured and report.exit_code == 3 and not report.thresholds_passed
    assert report.outcomes[0]["error"]["class"] == "TimeoutError"


def test_save_report_writes_json_md_and_lineage(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path))
    r1 = Runner().run(spec, base_dir=tmp_path)
    r2 = Runner().run(spec, base_dir=tmp_path)  # same second: must not overwrite
    j1, m1 = save_report(r1, state_dir=tmp_path / "st")
    j2, m2 = save_report(r2, state_dir=tmp_path / "st")
    assert j1 != j2 and j1.exists() and j2.exists() and m1.read_text().startswith("# evalfarm run")
    stub = json.loads(j1.with_name(j1.stem + ".lineage.json").read_text())
    assert set(stub) == {"artefact_path", "content_hash", "lineage_tag", "ts_ns"}
    assert stub["content_hash"] == "sha256:" + sha256_hex(j1.read_bytes())
    assert stub["artefact_path"] == str(j1.resolve()) and stub["lineage_tag"] == "api-tag"
    assert json.loads(j1.read_text())["per_adapter"] == r1.per_adapter


def test_markdown_lists_failures(tmp_path: Path) -> None:
    report = Runner(executor=lambda a, p: "x").run(load_spec(write(tmp_path)), base_dir=tmp_path)
    md = render_markdown(report.to_dict())
    assert "## Threshold failures" in md and "missing expected substring 'hello world'" in md
