"""Issue 10, item 10 (reports and artifacts): a stored report or A/B artifact with a wrong field type is
one line and exit 2 for diff, gate, baseline and ab verify; never a traceback, never exit 1 (CI reads 1
as "quality failed") and never the last-resort exit 4. The named cases run through the CLI in a
subprocess; the exhaustive sweep (every field of a real report or artifact, set to each wrong type)
runs the same entry point in-process, since it is some 2,500 invocations."""
from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, run_cli

SMOKE = str(EXAMPLES / "smoke.yaml")
WRONG = [["a"], {}, "x", 1.5, -1, None, True, "a\nb", 10 ** 30]


def one_line_error(res) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalfarm: error: ") and "Traceback" not in res.stderr, lines
    return lines[0]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("good") / "good.json"
    res = run_cli("run", SMOKE, "--no-save", "--output", str(path))
    assert res.returncode == 0, res.stderr
    return path


def edited(good: Path, tmp: Path, change) -> Path:
    data = json.loads(good.read_text())
    change(data)
    out = tmp / "edited.json"
    out.write_text(json.dumps(data))
    return out


@pytest.mark.parametrize("what, change, needle", [
    ("prompt_id list", lambda d: d["outcomes"][0].update(prompt_id=["a"]), "outcomes[0].prompt_id: expected a string"),
    ("adapter object", lambda d: d["outcomes"][0].update(adapter={}), "outcomes[0].adapter: expected a string"),
    ("per_adapter.mock empty", lambda d: d["per_adapter"].update(mock={}), "per_adapter.mock.items"),
    ("spec_name list", lambda d: d.update(spec_name=["q"]), "spec_name must be a string"),
    ("finished_at huge int", lambda d: d.update(finished_at=10 ** 30), "finished_at: expected a string"),
    ("latency text", lambda d: d["outcomes"][0].update(latency_ms="x"), "outcomes[0].latency_ms: expected a number"),
    ("cost text", lambda d: d["cost"].update(model_usd="x"), "cost: expected an object of numbers"),
    ("pass_k without flaky", lambda d: d["per_adapter"]["mock"]["pass_k"].pop("flaky"), "per_adapter.mock.pass_k"),
])
def test_wrong_field_types_are_one_line_for_diff_gate_and_baseline(tmp_path, good, what, change, needle):
    bad = edited(good, tmp_path, change)
    for args in (["diff", str(good), str(bad)], ["gate", str(bad)], ["baseline", str(bad), "--name", "b"]):
        line = one_line_error(run_cli(*args, "--state-dir", str(tmp_path / "st")))
        assert f"{bad}: not an evalfarm report" in line and needle in line, (what, args, line)
    assert not (tmp_path / "st" / "runs").exists()


def _cli(args: list[str]) -> tuple[int, str]:
    """The real `evalfarm` entry point (evalfarm.cli.main), in this process: its exit code and output."""
    from evalfarm.cli import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            main.main(args, prog_name="evalfarm")
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    return code, err.getvalue() + out.getvalue()


def _paths(obj, pre=(), depth=0):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield pre + (k,)
            if depth < 4 and k not in ("outcomes", "prompts"):
                yield from _paths(v, pre + (k,), depth + 1)
    elif isinstance(obj, list) and obj:
        yield pre + (0,)
        yield from _paths(obj[0], pre + (0,), depth + 1)


def _set(data, path, value):
    for k in path[:-1]:
        data = data[k]
    data[path[-1]] = value


def test_every_report_field_with_a_wrong_type_is_never_a_crash_nor_exit_1(tmp_path, good, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = json.loads(good.read_text())
    paths = list(_paths(base)) + [("outcomes", 0, k) for k in base["outcomes"][0]] + \
        [("prompts", 0, k) for k in base["prompts"][0]]
    crashes, tried = [], 0
    for path in paths:
        for value in WRONG:
            data = json.loads(json.dumps(base))
            _set(data, path, value)
            (tmp_path / "f.json").write_text(json.dumps(data))
            for args in (["diff", str(good), "f.json"], ["gate", "f.json", "--junit", "j.xml", "--pr-summary", "p.md"],
                         ["baseline", "f.json", "--name", "q"]):
                state = tmp_path / f"st{tried}"
                code, out = _cli([*args, "--state-dir", str(state)])
                if args[0] == "baseline" and code == 0:
                    code, out = _cli(["ls", "--state-dir", str(state)])  # what baseline recorded must list
                tried += 1
                if code == 4 or "Traceback" in out or (code == 1 and args[0] != "gate"):
                    crashes.append((path, value, args[0], code, out.strip()[-200:]))
    print(f"\n{tried} invocations over {len(paths)} fields x {len(WRONG)} wrong values")
    assert not crashes, f"{len(crashes)} crashes, first: {crashes[:5]}"


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("ab")
    res = run_cli("ab", "--suite", str(EXAMPLES / "ab" / "suite.yaml"), "--arm-a", "baseline", "--arm-b", "terse",
                  "--arms", "3", cwd=cwd)
    assert res.returncode == 0, res.stderr
    return cwd


def _artifact(ab_dir: Path) -> Path:
    [path] = [p for p in (ab_dir / ".evalfarm" / "reports" / "eval_ab").glob("*.json")]
    return path


@pytest.mark.parametrize("key, value, named", [
    ("arm_order", None, "arm_order"), ("arm_order", ["nosuch"], "arms"), ("arms", [], "arms"),
    ("pairs", [{"a": ["x"], "b": "terse", "label": "l", "honest": True}], "pairs"), ("executor", "synthetic", "executor"),
    ("verdict", None, "verdict"), ("plan", 7, "plan")])
def test_ab_verify_of_a_misshapen_artifact_is_one_line_exit_2(ab_dir, tmp_path, key, value, named):
    art = json.loads(_artifact(ab_dir).read_text())
    art[key] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(art))
    line = one_line_error(run_cli("ab", "verify", str(bad), cwd=ab_dir))
    assert f"{bad}: not an evalfarm A/B comparison artifact ({named}: expected" in line, line


def test_every_artifact_field_and_ledger_row_type_is_verified_or_refused_never_a_crash(ab_dir, monkeypatch):
    import hashlib

    monkeypatch.chdir(ab_dir)
    path = _artifact(ab_dir)
    base = json.loads(path.read_text())
    ledger = (ab_dir / ".evalfarm" / "ab" / "ledger.jsonl").read_bytes()
    crashes, tried = [], 0
    for field in _paths(base):
        for value in WRONG:
            data = json.loads(json.dumps(base))
            _set(data, field, value)
            Path("m.json").write_text(json.dumps(data))
            code, out = _cli(["ab", "verify", "m.json"])
            tried += 1
            if code not in (1, 2) or "Traceback" in out:
                crashes.append((field, value, code, out.strip()[-200:]))
    row = json.loads(ledger.split(b"\n")[0])
    for key in row:  # a crafted ledger row the artifact points at: its types reach the figures
        for value in WRONG:
            line = json.dumps({**row, key: value}, sort_keys=True, separators=(",", ":")).encode()
            Path("l2.jsonl").write_bytes(ledger + line + b"\n")
            data = json.loads(json.dumps(base))
            data["arms"][data["arm_order"][0]]["ledger_rows"][0] = hashlib.sha256(line).hexdigest()
            Path("m.json").write_text(json.dumps(data))
            code, out = _cli(["ab", "verify", "m.json", "--ledger", "l2.jsonl"])
            tried += 1
            if code not in (1, 2) or "Traceback" in out:
                crashes.append(("ledger", key, value, code, out.strip()[-200:]))
    print(f"\n{tried} ab verify invocations")
    assert not crashes, f"{len(crashes)} crashes, first: {crashes[:5]}"


def test_input_errors_exit_2_and_internal_errors_exit_4_with_the_traceback_only_under_debug(tmp_path):
    """Input errors are exit 2 above (every case); an unexpected exception (here an adapter whose
    ``config()`` raises while the run is planned) is one line, exit 4, and its traceback is shown only
    with --debug. (A plug-in that fails to import is named in one line, exit 2: test_architecture.)"""
    (tmp_path / "plugin_boom.py").write_text(
        "from evalfarm import register_adapter\n\n"
        "class Boom:\n"
        "    def __init__(self, entry):\n        self.id = entry\n"
        "    def config(self):\n        raise ZeroDivisionError('a bug in a plug-in')\n\n"
        "register_adapter('boom', Boom)\n")
    (tmp_path / "s.yaml").write_text("name: b\nadapters: [boom]\nprompts:\n  - {id: a, text: hi}\n")
    env = {"EVALFARM_PLUGINS": "plugin_boom", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    res = run_cli("run", str(tmp_path / "s.yaml"), "--state-dir", str(tmp_path / "st"), **env)
    assert res.returncode == 4, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error: ZeroDivisionError: a bug in a plug-in" in lines[0]
    assert "--debug" in lines[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "st" / "runs").exists()  # nothing half-written
    res = run_cli("--debug", "run", str(tmp_path / "s.yaml"), "--state-dir", str(tmp_path / "st"), **env)
    assert res.returncode != 0 and "Traceback" in res.stderr and "ZeroDivisionError" in res.stderr
