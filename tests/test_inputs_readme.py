"""Every YAML and Python snippet of README.md works as the README says (issues 10 and 21). A spec is
loaded and, unless it needs a repo, run in this process: the outcome its last comment states
(``# evalfarm run: PASSED, 4 items, exit 0``) must be what happens; a spec fragment (adapters,
thresholds) is loaded inside a minimal spec, a case with load_cases, a spawn suite and an A/B suite
with their loaders, an agent script with its; the Python runs in a fresh interpreter beside a copy of
examples/ (its asserts are its outcome). The "Five minutes on a farm" commands run as written, on free
ports. Every EVALFARM_* variable the code reads is in the settings table. A snippet of a kind this test
does not know fails it, so a new snippet gets checked too."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, env_for

README = ROOT / "README.md"
FENCE = re.compile(r"^( *)```(yaml|python|jsonl)\n(.*?)^\1```", re.S | re.M)
OUTCOME = re.compile(r"^# evalfarm run: (PASSED|FAILED), (\d+) items, exit (\d)", re.M)
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
    assert kinds.count("yaml") >= 6 and kinds.count("python") >= 1 and kinds.count("jsonl") >= 1, kinds
    assert len(OUTCOME.findall(README.read_text(encoding="utf-8"))) >= 1


def jsonl_after(line: int) -> str | None:
    """The JSONL block that follows the snippet at ``line`` (a spec's dataset), if the next block is one."""
    later = [(k, b) for k, n, b in snippets() if n > line]
    return later[0][1] if later and later[0][0] == "jsonl" else None


@pytest.mark.parametrize("kind, line, body", snippets(), ids=lambda v: str(v) if isinstance(v, int) else None)
def test_readme_snippet(tmp_path, kind, line, body):
    where = f"README.md:{line}"
    if kind == "jsonl":  # a spec's dataset: each line an object with an id and a text
        rows = [json.loads(x) for x in body.splitlines() if x.strip()]
        assert rows and all({"id", "text"} <= set(r) for r in rows), where
        return
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
    elif "tasks" in data and "repo" not in data:  # an A/B suite
        from evalfarm.ab.tasks import load_suite

        path.write_text(body)
        suite = load_suite(path)
        assert [t.id for t in suite.tasks] == [t["id"] for t in data["tasks"]], where
    elif "name" in data:  # a whole spec, or a spawn suite
        path.write_text(body)
        if data.get("workspace") or "repo" in data:  # spawn mode: its repo and base must exist
            subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
            subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                            "--allow-empty", "-m", "base"], check=True)
        if data.get("dataset"):
            dataset = jsonl_after(line)
            assert dataset is not None, f"{where}: the spec names {data['dataset']}: show it in a jsonl block below"
            (tmp_path / data["dataset"]).write_text(dataset)
        spec = load_spec(path)
        assert spec.name == data["name"] and spec.adapter_ids, where
        if spec.workspace is None:  # runnable here: it must do what its outcome comment says
            stated = OUTCOME.search(body)
            assert stated, f"{where}: end the spec with '# evalfarm run: PASSED, N items, exit 0' (its outcome)"
            from evalfarm import Runner

            report = Runner().run(spec, base_dir=tmp_path).to_dict()
            passed = report["thresholds_passed"]
            happened = ("PASSED" if passed else "FAILED", len(report["outcomes"]), 0 if passed else 1)
            assert happened == (stated.group(1), int(stated.group(2)), int(stated.group(3))), (where, happened)
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


def quickstart() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Five minutes on a farm", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_five_minutes_on_a_farm_runs_as_written(tmp_path):
    """The quickstart's commands in bash, as written but on free ports (the README's 6390 and 8080 may
    be taken here) and with the venv already made: the run passes on the worker, status lists it done,
    the dashboard lists it."""
    from conftest import free_port

    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (.ci/run installs it)")
    redis_port, web_port = free_port(), free_port()
    lines = [ln for ln in quickstart().splitlines() if ln.strip() and not ln.startswith("make venv")]
    script = "\n".join(lines).replace("6390", str(redis_port)).replace("8080", str(web_port))
    assert "evalfarm worker" in script and "evalfarm run examples/smoke.yaml" in script and "evalfarm serve" in script
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    probe = (f"import time, urllib.request as u\n"
             f"for _ in range(100):\n"
             f"    try:\n"
             f"        print(u.urlopen('http://127.0.0.1:{web_port}/api/runs').read().decode()); break\n"
             f"    except OSError:\n"
             f"        time.sleep(0.1)\n")
    (tmp_path / "probe.py").write_text(probe)
    stop = f"kill %1 %2; redis-cli -p {redis_port} shutdown nosave || true"  # as the README says to stop
    (tmp_path / "quickstart.sh").write_text("set -e\n" + script + "\npython3 probe.py\n" + stop + "\n")
    env = env_for(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    try:
        # files, not pipes: the worker and the dashboard run on in the background, holding what they inherit
        with open(tmp_path / "out", "w") as out_f, open(tmp_path / "err", "w") as err_f:
            proc = subprocess.run(["bash", str(tmp_path / "quickstart.sh")], cwd=tmp_path, env=env, stdout=out_f,
                                  stderr=err_f, timeout=180)
        stdout, stderr = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
        assert proc.returncode == 0, stderr[-3000:]
        out = stdout.splitlines()
        assert any("PASSED" in ln for ln in out), stdout[-3000:]
        status = [ln.split("\t") for ln in out if ln.count("\t") == 4]
        assert status and status[0][1:4] == ["done", "20/20", "smoke"], status
        api = [ln for ln in out if ln.startswith(("[", "{"))]  # the dashboard's /api/runs (the probe)
        assert api and '"smoke"' in api[-1], stdout[-2000:]
    finally:  # if the script stopped early
        subprocess.run(["redis-cli", "-p", str(redis_port), "shutdown", "nosave"], capture_output=True, check=False)
        subprocess.run(["pkill", "-f", f"serve --port {web_port}"], check=False)


def test_every_setting_the_code_reads_is_in_the_settings_table():
    names: set[str] = set()
    for path in (ROOT / "evalfarm").rglob("*.py"):
        names |= set(re.findall(r"EVALFARM_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
    names = {n for n in names if not n.startswith("EVALFARM_FAILPOINT_")}
    table = README.read_text(encoding="utf-8").split("### Settings (environment)", 1)[1].split("\n## ", 1)[0]
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert len(names) > 20 and not missing, missing
