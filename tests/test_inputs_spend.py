"""Issue 10, item 12: every output path and flag combination is checked before the first request.
Counted at a real `evalfarm mock-provider` (an OpenAI-compatible server in a subprocess): a refused
command sent 0 requests, and the same command with the bad flag fixed sends them (the counter works)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, run_cli

SUITE = str(EXAMPLES / "ab" / "suite.yaml")


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump([{"id": f"c{i}", "input": f"say ok-{i}"} for i in range(10)]))
    (tmp_path / "afile").write_text("not a directory")
    return tmp_path


def requests(provider) -> int:
    return provider.stats()["requests"]


def refused(res, *names: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-1000:])
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("evalfarm: connecting to ")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, lines
    assert all(n in lines[0] for n in names), (names, lines[0])
    return lines[0]


@pytest.mark.parametrize("flags, names", [
    (["--output", "/proc/nope/x.json"], ["--output"]),
    (["--output", "afile/x.json"], ["--output"]),
    (["--promote", "--no-save"], ["--promote", "--no-save"]),
    (["--junit", "afile/j.xml"], ["--junit"]),
    (["--junit", "/proc/nope/j.xml"], ["--junit"]),
    (["--pr-summary", "."], ["--pr-summary"]),
    (["--gate", "--baseline", "nosuch"], ["--baseline nosuch"]),
    (["--baseline", "nosuch"], ["--baseline nosuch"]),
    (["--promote", "--baseline", "bad/name"], ["--baseline"]),
    (["--state-dir", "afile"], ["--state-dir"]),
])
def test_run_refuses_before_the_first_request(project, provider, flags, names):
    mock = provider()
    res = run_cli("run", "--dataset", "cases.yaml", "--model", "m", "--base-url", mock.url, *flags, cwd=project)
    refused(res, *names)
    assert requests(mock) == 0
    assert not (project / ".evalfarm" / "runs").exists()


def test_the_counter_counts(project, provider):
    mock = provider()
    res = run_cli("run", "--dataset", "cases.yaml", "--model", "m", "--base-url", mock.url, "--junit", "j.xml",
                  "--output", "o.json", cwd=project)
    assert res.returncode == 0, res.stderr
    assert requests(mock) == 10 and (project / "j.xml").is_file() and (project / "o.json").is_file()


def ab(project: Path, mock, *flags: str):
    return run_cli("ab", "--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--executor", "provider",
                   "--model", "m", "--base-url", mock.url, *flags, cwd=project)


@pytest.mark.parametrize("flags, names", [
    (["--output", "/proc/nope/x.json"], ["--output"]),
    (["--output", "afile/x.json"], ["--output"]),
    (["--reports-dir", "afile"], ["--reports-dir"]),
    (["--reports-dir", "/proc/nope"], ["--reports-dir"]),
    (["--audit-dir", "afile"], ["--audit-dir"]),
    (["--audit-dir", "/proc/nope"], ["audit chain"]),
    (["--ledger", "afile/l.jsonl"], ["--ledger"]),
    (["--ledger", "."], ["--ledger"]),
])
def test_ab_refuses_before_the_first_request(project, provider, flags, names):
    mock = provider()
    res = ab(project, mock, *flags)
    if "/proc/nope" in flags and "--audit-dir" in flags:  # the audit chain's own exit code: it cannot be appended
        assert res.returncode == 4 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "cannot create the audit key /proc/nope/chain.key" in res.stderr and "nothing was run" in res.stderr
    else:
        refused(res, *names)
    assert requests(mock) == 0
    assert not (project / ".evalfarm").exists()


def test_ab_refuses_a_broken_chain_before_the_first_request(project, provider):
    mock = provider()
    assert ab(project, mock).returncode == 0
    sent = requests(mock)
    assert sent == 24  # 2 arms x 12 tasks: the counter counts
    chain = project / ".evalfarm" / "audit" / "chain.jsonl"
    chain.write_text("")  # emptied: its head still says 1 entry
    res = ab(project, mock)
    assert res.returncode == 4 and "nothing was run" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert requests(mock) == sent


def test_variant_mode_checks_its_output_first(project):
    ex = EXAMPLES / "ab"
    res = run_cli("ab", "--variant-a", str(ex / "variant_a.yaml"), "--variant-b", str(ex / "variant_b.yaml"),
                  "--tasks", str(ex / "tasks.yaml"), "--output", "afile/x.json", cwd=project)
    refused(res, "--output")
