"""The gate for case-file runs (`run --dataset --model`) against the real mock provider (an
OpenAI-compatible server in a subprocess), on the embedded farm and on Redis with a worker."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from providers_fixture import MockProviderProc


@pytest.fixture
def provider():
    p = MockProviderProc()
    yield p
    p.stop()


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump([
        {"id": c, "input": f"please say ok-{c}", "checks": [{"kind": "contains", "value": f"ok-{c}"}],
         "tags": ["smoke"]} for c in ("a", "b", "c")]))
    store = tmp_path / "prompts" / "echo"
    store.mkdir(parents=True)
    (store / "v1.yaml").write_text("system: Repeat the request.\nuser: '{input}'\n")
    # v2 makes the provider refuse to follow: the mock answers [[reply:...]] verbatim
    (store / "v2.yaml").write_text("system: Repeat the request.\nuser: '[[reply:sorry, no]] {input}'\n")
    (store / "current").write_text("v1\n")
    return tmp_path


def run(project: Path, provider: MockProviderProc, *args: str, broker: str | None = None):
    return run_cli("run", "--dataset", "cases.yaml", "--model", "m1", "--base-url", provider.url,
                   "--state-dir", "st", *args, cwd=project, broker=broker)


def test_case_file_runs_promote_gate_and_diff(project, provider, redis_server, start_worker):
    first = run(project, provider, "--promote")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "prompt echo@v1" in first.stdout and "to baseline 'cases' (new baseline)" in first.stdout

    second = run(project, provider, "--prompt-version", "v2", "--gate", "--junit", "j.xml")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "regressions  FAIL" in second.stdout and "3 case(s) passed in the baseline and fail now" in second.stdout

    # the same on the Redis farm: the prompt version travels inside the items
    start_worker(redis_server.url, concurrency=2)
    farm = run(project, provider, "--prompt-version", "v2", "--gate", "--json", broker=redis_server.url)
    assert farm.returncode == 1, farm.stderr
    report = json.loads(farm.stdout)
    assert report["mode"] == "redis" and {o["output"] for o in report["outcomes"]} == {"sorry, no"}
    assert "regressions  FAIL" in farm.stderr

    listing = run_cli("ls", "--state-dir", "st", cwd=project).stdout.strip().splitlines()
    assert [x.split("\t")[6] for x in listing] == ["echo@v2", "echo@v2", "echo@v1"]
    d = run_cli("diff", "baseline:cases", listing[0].split("\t")[0], "--state-dir", "st", "--json", cwd=project)
    cases = json.loads(d.stdout)["cases"]
    assert cases["counts"]["regressed"] == 3 and cases["mcnemar"]["p_value"] == 0.25


def test_provider_down_under_the_gate_is_nothing_measured(project, provider):
    assert run(project, provider, "--promote").returncode == 0
    (project / "prompts" / "echo" / "v3.yaml").write_text("user: '[[status:401]] {input}'\n")  # bad key: no retry
    res = run(project, provider, "--prompt-version", "v3", "--gate")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "gate: NOTHING MEASURED" in res.stdout and "regressions  PASS" not in res.stdout.replace("SKIPPED", "")
