"""Issue 10, item 13: every YAML and Python snippet of README.md works as the README says. A spec is
loaded with load_spec, a spec fragment (adapters, thresholds) inside a minimal spec, a case with
load_cases, and the Python runs in a fresh interpreter beside a copy of examples/. A snippet of a kind
this test does not know fails it, so a new snippet gets checked too."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, env_for

README = ROOT / "README.md"
FENCE = re.compile(r"^( *)```(yaml|python)\n(.*?)^\1```", re.S | re.M)
MINIMAL = {"name": "readme", "adapters": ["mock"], "prompts": [{"id": "readme-a", "text": "hi"}]}


def snippets() -> list[tuple[str, int, str]]:
    text = README.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        indent = len(m.group(1))
        body = "".join(line[indent:] + "\n" for line in m.group(3).splitlines())
        out.append((m.group(2), text[: m.start()].count("\n") + 1, body))
    return out


def test_the_readme_has_the_snippets_this_test_checks():
    kinds = [k for k, _, _ in snippets()]
    assert kinds.count("yaml") >= 4 and kinds.count("python") >= 1, kinds


@pytest.mark.parametrize("kind, line, body", snippets(), ids=lambda v: str(v) if isinstance(v, int) else None)
def test_readme_snippet(tmp_path, kind, line, body):
    where = f"README.md:{line}"
    if kind == "python":
        shutil.copytree(ROOT / "examples", tmp_path / "examples")
        res = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=env_for(), capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, f"{where}: {res.stderr[-2000:]}"
        return
    from evalfarm import load_spec
    from evalfarm.spec.cases import load_cases

    data = yaml.safe_load(body)  # plain YAML first: the README's own text must parse
    assert isinstance(data, dict), where
    path = tmp_path / "snippet.yaml"
    if {"id", "input"} <= set(data):  # a case
        path.write_text(body)
        [(case, _, _)] = load_cases([path])
        assert case.id == data["id"] and case.criteria and case.checks, where
    elif "name" in data:  # a whole spec
        path.write_text(body)
        if data.get("workspace"):  # a spawn-mode spec: its repo and base must exist
            subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
            subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                            "--allow-empty", "-m", "base"], check=True)
        if data.get("dataset"):
            (tmp_path / data["dataset"]).write_text('{"id": "from-dataset", "text": "x"}\n')
        spec = load_spec(path)
        assert spec.name == data["name"] and spec.adapter_ids, where
    elif set(data) <= {"adapters", "thresholds", "judge", "prompts"}:  # a fragment of a spec
        path.write_text(yaml.safe_dump({**MINIMAL, **data}, sort_keys=False))
        spec = load_spec(path)
        for key in data:
            assert getattr(spec, key), (where, key)
    elif "steps" in data:  # a mock-provider --agent-script
        from evalfarm.mock.script import load_agent_script

        path.write_text(body)
        script = load_agent_script(path)
        assert [s.kind for s in script.steps] == [next(iter(set(step) - {"usage"})) for step in data["steps"]], where
    else:
        pytest.fail(f"{where}: a YAML snippet this test does not know how to check: keys {sorted(data)}")
