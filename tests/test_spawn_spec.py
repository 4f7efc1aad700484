"""Spawn mode in specs and suites, in this process: validation before anything runs (one line,
file:line: field, exit 2, nothing written), the spawn suite and the spec plan the same items, the
check's verdict is the item's, the diff and the check output are stored content-addressed, setup
runs first, agents run two at a time here, and plain specs keep their bytes. Real git, real
subprocesses (the fake agent through the `command` driver)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from evalfarm.canonical import canonical_json
from evalfarm.core.outcome import Outcome
from evalfarm.core.plan import prompt_json
from evalfarm.spec.models import AdapterSpec, EvalSpec, PromptSpec
from spawn_support import (assert_clean, fake_adapter, git, make_repo, outcomes_by_prompt, report_of, spawn_env,
                           UNSANDBOXED, worktrees, write_spec)


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


def run(tmp_path, *args, **env):
    return run_cli("run", *args, cwd=tmp_path, timeout=180, **spawn_env(tmp_path), **env)


def one_line_error(res, expected: str) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert expected in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr


def lines_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.mark.parametrize("case", ["no repo", "not a repo", "unknown base", "unknown agent", "no agent", "no template",
                                  "no workspace", "mixed adapters", "check without agents", "url password",
                                  "secret env", "unknown isolation", "key refused"])
def test_bad_spawn_specs_stop_before_anything_runs(tmp_path, repo, case):
    (tmp_path / "plain").mkdir()
    spec = {"name": "bad", "workspace": {"repo": str(repo), "base": "main"}, "adapters": [fake_adapter()],
            "prompts": [{"id": "t", "text": "ok", "check": "true"}]}
    field, expected = None, None
    if case == "no repo":
        spec["workspace"]["repo"] = "nope"
        field, expected = "repo:", f"workspace.repo: repo {tmp_path / 'nope'}: no such directory"
    elif case == "not a repo":
        spec["workspace"]["repo"] = "plain"
        field, expected = "repo:", "workspace.repo: repo " + str(tmp_path / "plain") + ": not a git repository"
    elif case == "unknown base":
        spec["workspace"]["base"] = "no-such-branch"
        field, expected = "base:", "workspace.base: base 'no-such-branch': no such commit, branch or tag"
    elif case == "unknown agent":
        spec["adapters"][0]["agent"] = "cursor"
        field, expected = "agent: cursor", "adapters[0].agent: Input should be 'claude', 'codex', 'gemini', 'aider', " \
                                           "'opencode' or 'command'"
    elif case == "no agent":
        del spec["adapters"][0]["agent"], spec["adapters"][0]["template"]
        field, expected = "- id: fake", "adapters[0]: provider agent needs 'agent'"
    elif case == "no template":
        del spec["adapters"][0]["template"]
        field, expected = "- id: fake", "adapters[0]: 'template' (a command line with {prompt}) goes with agent: command"
    elif case == "no workspace":
        del spec["workspace"]
        field, expected = "- id: fake", "adapters[0]: agent adapters work in a git worktree: add workspace"
    elif case == "mixed adapters":
        spec["adapters"].append("mock")
        field, expected = "- mock", "adapters[1]: a spec with a workspace runs coding agents only; adapter 'mock'"
    elif case == "check without agents":
        del spec["workspace"]
        spec["adapters"] = ["mock"]
        field, expected = "check: 'true'", "prompts[0].check: only agents run check"
    elif case == "url password":
        spec["workspace"]["repo"] = "https://user:hunter2@git.example.com/r.git"
        field, expected = "repo:", "workspace.repo: repo https://user:***@git.example.com/r.git: the URL carries a " \
                                   "password"
    elif case == "secret env":
        spec["workspace"]["env"] = ["AWS_SECRET_ACCESS_KEY"]
        field, expected = "- id: fake", "adapters[0]: workspace env AWS_SECRET_ACCESS_KEY looks like a secret"
    elif case == "unknown isolation":
        spec["workspace"]["isolation"] = "chroot"
        field, expected = "isolation:", "workspace.isolation: Input should be 'sandbox' or 'none'"
    elif case == "key refused":
        spec["adapters"][0]["api_key_env"] = "WORKER_DB_PASSWORD"
        field, expected = "- id: fake", "adapters[0]: api_key_env WORKER_DB_PASSWORD is refused on this host"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    res = run(tmp_path, str(path))
    one_line_error(res, f"{path}:{lines_of(path, field)}: {expected}")
    assert "hunter2" not in res.stderr
    assert not (tmp_path / ".evalfarm").exists() and not (tmp_path / "spawn").exists()  # nothing written, nothing run


def test_agent_not_installed_names_the_install_command(tmp_path, repo):
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": "t", "text": "x", "check": "true"}],
                      adapters=[{"id": "c", "provider": "agent", "agent": "claude", "model": "claude-sonnet-4-5"}])
    empty = tmp_path / "no-agents"
    empty.mkdir()
    res = run(tmp_path, str(spec), EVALFARM_AGENTS_DIR=str(empty), PATH="/usr/bin:/bin")
    one_line_error(res, f"{spec}:{lines_of(spec, '- id: c')}: adapters[0]: claude: not installed: run `make agents` "
                        f"(npm install --prefix {empty}/claude @anthropic-ai/claude-code@")


def test_suite_errors_name_the_suite_line(tmp_path, repo):
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"repo: {repo}\nbase: main\ntasks:\n  - id: a\n    prompt: x\n    check: 'true'\n"
                     "  - id: a\n    prompt: y\n    check: 'true'\n")
    one_line_error(run(tmp_path, str(suite)), f"{suite}:7: tasks[1].id: duplicate task id 'a' (first on line 4)")
    suite.write_text(f"repo: {repo}\nbase: main\ntasks:\n  - id: a\n    prompt: x\n")
    one_line_error(run(tmp_path, str(suite)), f"{suite}:4: tasks[0].check: required field is missing")
    suite.write_text(f"repo: {repo}\nbase: main\ntasks:\n  - id: a\n    prompt: x\n    check: 'true'\n")
    one_line_error(run(tmp_path, str(suite)), f"{suite}:1: adapters: a suite run by `evalfarm run` names its agents")
    suite.write_text(f"repo: {repo}\nbase: v9\nadapters: [{json.dumps(fake_adapter())}]\n"
                     "tasks:\n  - {id: a, prompt: x, check: 'true'}\n")
    one_line_error(run(tmp_path, str(suite)), f"{suite}:2: workspace.base: base 'v9': no such commit")


def test_a_spawn_suite_and_a_spec_plan_the_same_items_and_the_check_decides(tmp_path, repo):
    tasks = [{"id": "fixed", "prompt": "Fix it\nok", "check": "grep -q 'hello, world' hello.py"},
             {"id": "wrong", "prompt": "Fix it\nok", "check": "echo 'FAILED test_goodbye: expected goodbye'; "
                                                              "grep -q goodbye hello.py"}]
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "greet", "repo": "repo", "base": "main",
                                     "adapters": [fake_adapter(price={"input": 3, "output": 15})], "tasks": tasks},
                                    sort_keys=False))
    spec = write_spec(tmp_path / "spec.yaml", repo,
                      [{"id": t["id"], "text": t["prompt"], "check": t["check"]} for t in tasks],
                      adapters=[fake_adapter(price={"input": 3, "output": 15})])
    reports = {}
    for path in (suite, spec):
        res = run(tmp_path, str(path), "--json", "--no-save")
        assert res.returncode == 0, res.stderr
        reports[path.name] = report_of(res)
    a, b = reports["suite.yaml"], reports["spec.yaml"]
    assert [o["key"] for o in a["outcomes"]] == [o["key"] for o in b["outcomes"]]  # the same items, the same keys
    commit = git(repo, "rev-parse", "main").strip()
    assert a["workspace"] == b["workspace"] == {"repo": str(repo), "base": commit, "isolation": "sandbox", "env": [],
                                                   "limits": {"memory_mb": 4096, "pids": 512, "cpu_s": 3600,
                                                              "file_mb": 2048}, "max_tokens_per_task": None,
                                                   "seeds": {}}
    by = outcomes_by_prompt(a)
    fixed, wrong = by["fixed"][0], by["wrong"][0]
    assert fixed["passed"] is True and fixed["error"] is None
    # the check is the verdict, a quality failure (not a runtime error), its output kept
    assert wrong["passed"] is False and wrong["error"] is None and wrong["failure_mode"] == "instruction_miss"
    check = wrong["checks"][-1]
    assert check["kind"] == "command" and check["passed"] is False
    assert check["reason"].startswith("exit 1: FAILED test_goodbye") and "FAILED test_goodbye" in check["output"]
    blob_dir = tmp_path / "blobs"
    log = (blob_dir / f"{wrong['agent']['check']['output_sha256']}.log").read_bytes()
    assert log == b"FAILED test_goodbye: expected goodbye\n"
    # usage from the agent's own report (cost too), the diff against the base with its patch stored by hash
    assert (fixed["input_tokens"], fixed["output_tokens"], fixed["cost_usd"]) == (321, 54, 0.0042)
    agent = fixed["agent"]
    assert agent["agent"] == "command" and agent["cost_source"] == "agent" and agent["turns"] == 2
    assert agent["base"] == commit and agent["diff"]["files"] == 1
    assert (agent["diff"]["insertions"], agent["diff"]["deletions"]) == (1, 1)
    patch = (blob_dir / f"{agent['diff']['patch_sha256']}.patch").read_bytes()
    assert hashlib.sha256(patch).hexdigest() == agent["diff"]["patch_sha256"]
    assert b'-print("hello")\n+print("hello, world")' in patch
    assert a["per_adapter"]["fake"]["items"] == 2
    assert_clean(repo, tmp_path / "spawn")


def test_patches_and_ledger_rows_go_to_the_state_dir(tmp_path, repo):
    """Without EVALFARM_BLOB_DIR an in-process run keeps its patches in its --state-dir (not ./.evalfarm),
    and a saved run appends one spend-ledger row per agent item there (STATE/cost/ledger.jsonl), once."""
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": "fixed", "text": "ok", "check": "true"},
                                                     {"id": "broken", "text": "ok", "check": "false"}])
    state = tmp_path / "elsewhere"
    res = run_cli("run", str(spec), "--json", "--state-dir", str(state), cwd=tmp_path, timeout=180,
                  **{**spawn_env(tmp_path), "EVALFARM_BLOB_DIR": ""})
    assert res.returncode in (0, 1), res.stderr
    report = report_of(res)
    digest = report["outcomes"][0]["agent"]["diff"]["patch_sha256"]
    assert (state / "blobs" / f"{digest}.patch").is_file() and not (tmp_path / ".evalfarm").exists()
    rows = [json.loads(line) for line in (state / "cost" / "ledger.jsonl").read_text().splitlines()]
    assert [(r["run_id"], r["item"], r["prompt_id"], r["passed"]) for r in rows] == [
        (report["run_id"], o["key"], o["prompt_id"], o["passed"]) for o in report["outcomes"]]
    for row, o in zip(rows, report["outcomes"]):
        assert (row["input_tokens"], row["output_tokens"], row["cost_usd"]) == (o["input_tokens"], o["output_tokens"],
                                                                                o["cost_usd"])
        assert row["agent"] == "command" and row["patch_sha256"] == o["agent"]["diff"]["patch_sha256"]
        assert row["check_exit"] == o["agent"]["check"]["exit_code"] and row["source"] == "run"
    assert_clean(repo, tmp_path / "spawn")


def test_setup_runs_first_new_files_and_commits_are_in_the_diff_and_a_failed_setup_is_a_runtime_error(tmp_path, repo):
    spec = write_spec(tmp_path / "spec.yaml", repo, [
        {"id": "committed", "text": "git", "setup": "echo notes > notes.txt",
         "check": "test \"$(git log -1 --format=%s)\" = 'fake agent edit'"},
        {"id": "broken-setup", "text": "ok", "setup": "echo 'pip: no such package' >&2; exit 7", "check": "true"}])
    res = run(tmp_path, str(spec), "--json", "--no-save")
    assert res.returncode == 0, res.stderr
    by = outcomes_by_prompt(report_of(res))
    committed = by["committed"][0]
    assert committed["passed"] is True, committed
    # the agent committed (its worktree's HEAD moved) and setup left an untracked file: both are in the diff
    assert committed["agent"]["diff"]["files"] == 2 and committed["agent"]["setup"]["exit_code"] == 0
    broken = by["broken-setup"][0]
    assert broken["passed"] is None and broken["failure_mode"] == "runtime_error"
    assert broken["error"]["class"] == "AgentRunError"
    assert broken["error"]["message"] == "setup failed (exit code 7): pip: no such package"
    assert git(repo, "log", "--oneline").count("\n") == 1  # the agent's commit stayed in its own worktree
    assert_clean(repo, tmp_path / "spawn")


def test_agents_run_two_at_a_time_in_this_process(tmp_path, repo):
    trace = tmp_path / "trace.log"
    spec = write_spec(tmp_path / "spec.yaml", repo,
                      [{"id": f"t{i}", "text": f"trace {trace} 1.0", "check": "true"} for i in range(6)], **UNSANDBOXED)
    res = run(tmp_path, str(spec), "--json", "--no-save")
    assert res.returncode == 0, res.stderr
    events = sorted((float(t), 1 if kind == "start" else -1)
                    for kind, _, t in (line.split() for line in trace.read_text().splitlines()))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert sum(1 for _, s in events if s == 1) == 6 and peak == 2  # EVALFARM_SPAWN_CONCURRENCY, default 2
    assert all(o["passed"] for o in report_of(res)["outcomes"])
    assert_clean(repo, tmp_path / "spawn")


def test_a_git_url_repo_is_mirrored_and_pinned(tmp_path, repo):
    url = f"file://{repo}"
    spec = write_spec(tmp_path / "spec.yaml", Path("unused"), [{"id": "t", "text": "ok",
                                                                "check": "grep -q 'hello, world' hello.py"}])
    data = yaml.safe_load(spec.read_text())
    data["workspace"]["repo"] = url
    spec.write_text(yaml.safe_dump(data))
    res = run(tmp_path, str(spec), "--json", "--no-save")
    assert res.returncode == 0, res.stderr
    report = report_of(res)
    assert report["workspace"]["repo"] == url and report["outcomes"][0]["passed"] is True
    [mirror] = (tmp_path / "spawn" / "repos").glob("*.git")
    assert worktrees(mirror) == [str(mirror)]  # the task's worktree came from the mirror and is gone
    assert_clean(repo, tmp_path / "spawn")


def test_plain_specs_keep_their_bytes():
    """The spawn fields are left out while unset: item keys, spec hashes and outcome lines of specs
    without agents are what they were."""
    p = PromptSpec(id="a", text="t", expected_output_contains=["x"])
    assert prompt_json(p) == canonical_json({"allow_truncation": False, "checks": [], "criteria": [],
                                             "expected_output_contains": ["x"], "expected_output_regex": None,
                                             "id": "a", "system": None, "tags": [], "text": "t"})
    a = AdapterSpec(id="m", model="gpt")
    assert set(a.model_dump()) == {"base_url", "api_key_env", "params", "price", "timeout_s", "max_in_flight",
                                   "requests_per_minute", "id", "provider", "model"}
    assert "workspace" not in EvalSpec(name="n", adapters=[a], prompts=[p]).model_dump()
    assert "agent" not in Outcome(key="k", prompt_id="a", adapter="m", trial=0).to_dict()
    with_agent = PromptSpec(id="a", text="t", check="make test")
    assert json.loads(prompt_json(with_agent))["check"] == "make test"


def test_a_check_is_never_silently_ignored(tmp_path):
    """A dataset prompt with a check run by a plain adapter (the loader cannot see a streamed dataset's
    prompts in time) fails its check rather than passing unchecked."""
    (tmp_path / "ds.jsonl").write_text(json.dumps({"id": "a", "text": "hi", "check": "make test"}) + "\n")
    (tmp_path / "spec.yaml").write_text("name: n\ndataset: ds.jsonl\nadapters: [mock]\n")
    res = run_cli("run", "spec.yaml", "--json", "--no-save", cwd=tmp_path)
    out = report_of(res)["outcomes"][0]
    assert out["passed"] is False and "does not run check commands" in out["golden_reason"]


def test_env_allow_list_reaches_agent_setup_and_check(tmp_path, repo):
    spec = write_spec(tmp_path / "spec.yaml", repo, [
        {"id": "t", "text": "escape", "setup": "test \"$SUITE_FLAG\" = on", "check": "test \"$SUITE_FLAG\" = on"}],
        env=["SUITE_FLAG"])
    res = run(tmp_path, str(spec), "--json", "--no-save", SUITE_FLAG="on", AWS_SECRET_ACCESS_KEY="aws-secret-123")
    assert res.returncode == 0, res.stderr
    out = report_of(res)["outcomes"][0]
    assert out["passed"] is True, out
    seen = json.loads(out["output"])  # the fake agent's environment
    assert seen["SUITE_FLAG"] == "on" and "AWS_SECRET_ACCESS_KEY" not in seen
    assert seen["HOME"].startswith(str(tmp_path / "spawn")) and "EVALFARM_SPAWN_DIR" not in seen
    assert_clean(repo, tmp_path / "spawn")



def test_the_spec_knows_the_agents_the_drivers_know():
    from evalfarm.agents.registry import AGENTS, get_driver
    from evalfarm.spec.models import AGENT_KEY_ENVS, AGENTS as SPEC_AGENTS

    assert SPEC_AGENTS == AGENTS
    assert AGENT_KEY_ENVS == {a: get_driver(a).key_env for a in AGENTS if a != "command"}


def test_ctrl_c_kills_the_running_agents_and_removes_their_worktrees(tmp_path, repo):
    import signal
    import subprocess
    import time

    from conftest import EVALFARM, env_for
    from spawn_support import pid_alive, wait_for

    trace = tmp_path / "trace.log"
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": f"t{i}", "text": f"trace {trace} 60", "check": "true"}
                                                     for i in range(3)], **UNSANDBOXED)
    proc = subprocess.Popen([*EVALFARM, "run", str(spec), "--no-save", "--json"], cwd=tmp_path,
                            env=env_for(**spawn_env(tmp_path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    starts = wait_for(lambda: trace.exists() and len(trace.read_text().splitlines()) == 2 and
                      trace.read_text().splitlines(), 30, "two agents running")
    pids = [int(line.split()[1]) for line in starts]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and b"never retrieved" not in err, err
    assert time.monotonic() - t0 < 10  # not the agents' 60 s
    assert not any(pid_alive(p) for p in pids)
    report = json.loads(out)
    assert report["stopped"] == "interrupted"
    assert_clean(repo, tmp_path / "spawn")


def test_agent_runs_are_never_served_from_the_cache(tmp_path, repo):
    trace = tmp_path / "trace.log"
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": "t", "text": f"trace {trace} 0", "check": "true"}],
                      **UNSANDBOXED)
    for _ in range(2):
        res = run(tmp_path, str(spec), "--json", "--no-save", "--cache")
        assert res.returncode == 0, res.stderr
        assert report_of(res)["outcomes"][0]["cached"] is False
    assert sum(1 for line in trace.read_text().splitlines() if line.startswith("start")) == 2
