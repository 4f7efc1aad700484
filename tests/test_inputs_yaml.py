"""Issue 10, items 9 and 10 (files): alias bombs, oversized and deeply nested YAML, list keys, deep and
huge-number JSONL, empty case files. Each is one line, exit 2, within a second of parsing, nothing
written; through the real CLI for a spec, a case file (--dataset), a spec's dataset and an A/B suite."""
from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli

SPEC_HEAD = "name: s\nadapters: [mock]\nprompts:\n  - {id: a, text: hi}\n"


def bomb(levels: int = 12, width: int = 9) -> str:
    """A "billion laughs" document: 1 KB that expands to width**levels values."""
    lines = ['l0: &l0 [' + ",".join(['"lol"'] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def one_line_error(res) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalfarm: error: ") and "Traceback" not in res.stderr, lines
    return lines[0]


def timed(*args: str, cwd: Path) -> tuple[object, float]:
    started = time.perf_counter()
    res = run_cli(*args, cwd=cwd, timeout=60)
    return res, time.perf_counter() - started


def bomb_inputs(tmp: Path) -> dict[str, tuple[list[str], Path]]:
    """Where a bomb can hide: a spec, a case file, a spec's case dataset, an A/B suite and task file."""
    body = bomb()
    (tmp / "spec.yaml").write_text(SPEC_HEAD + body)
    (tmp / "cases.yaml").write_text(body + "id: c\ninput: hi\ntags: *l11\n")
    (tmp / "cases_spec.yaml").write_text("name: s\nadapters: [mock]\ndataset: cases.yaml\n")
    (tmp / "suite.yaml").write_text(body + "name: s\ntasks: *l11\n")
    return {"spec": (["run", "spec.yaml", "--no-save"], tmp / "spec.yaml"),
            "case file": (["run", "--dataset", "cases.yaml", "--model", "m", "--no-save"], tmp / "cases.yaml"),
            "spec dataset": (["run", "cases_spec.yaml", "--no-save"], tmp / "cases.yaml"),
            "ab suite": (["ab", "--suite", "suite.yaml", "--arm-a", "balanced", "--arm-b", "terse"], tmp / "suite.yaml")}


@pytest.mark.parametrize("where", ["spec", "case file", "spec dataset", "ab suite"])
def test_alias_bombs_are_refused_within_a_second(tmp_path, where):
    args, bad_file = bomb_inputs(tmp_path)[where]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res, wall = timed(*args, cwd=tmp_path)
    line = one_line_error(res)
    assert f"{bad_file.name}:" in line and "alias" in line, line
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"\nalias bomb in the {where}: refused in {wall:.2f} s (whole CLI process), peak RSS {peak_mb:.0f} MB")
    assert wall < 5 and (peak_mb < 300 or before / 1024 >= 300), (wall, peak_mb)
    assert not (tmp_path / ".evalfarm").exists()


def test_the_refusal_itself_takes_milliseconds(tmp_path):
    from evalfarm.errors import SpecError
    from evalfarm.spec.sourcemap import load_yaml

    for levels in (8, 12, 30):
        text = SPEC_HEAD + bomb(levels)
        started = time.perf_counter()
        with pytest.raises(SpecError, match="aliases expand to more than 1,000,000 values"):
            load_yaml(text, tmp_path / "b.yaml")
        took = time.perf_counter() - started
        print(f"\n{levels} levels (9**{levels} values): refused in {took * 1000:.1f} ms")
        assert took < 1.0
    # a modest use of aliases (a criteria list shared by 200 cases) still loads
    shared = "crit: &c [{id: a, weight: 1, description: d}, {id: b, weight: 2, description: e}]\ncases:\n" + \
        "".join(f"  - {{id: c{i}, input: x, criteria: *c}}\n" for i in range(200))
    data, _ = load_yaml(shared, tmp_path / "ok.yaml")
    assert len(data["cases"]) == 200 and data["cases"][199]["criteria"][1]["id"] == "b"


def test_a_recursive_alias_is_refused(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC_HEAD + "x: &a [1, *a]\n")
    assert "s.yaml:5: invalid YAML: an alias refers to a value that contains it" in \
        one_line_error(run_cli("run", "s.yaml", "--no-save", cwd=tmp_path))


def test_documents_over_the_size_limit_are_refused_without_reading_them_whole(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "w") as fh:
        fh.write(SPEC_HEAD + "# " + "x" * 100 + "\n")
        for _ in range(170_000):
            fh.write("# " + "x" * 100 + "\n")  # 17 MB of comments
    res, wall = timed("run", "big.yaml", "--no-save", cwd=tmp_path)
    assert "big.yaml: larger than 16 MiB" in one_line_error(res) and wall < 10
    res, wall = timed("run", "/dev/zero", "--no-save", cwd=tmp_path)
    assert "/dev/zero: is a device" in one_line_error(res) and wall < 10
    (tmp_path / "s.yaml").write_text("name: s\nadapters: [mock]\ndataset: /dev/zero\n")
    assert "is a device" in one_line_error(run_cli("run", "s.yaml", "--no-save", cwd=tmp_path, timeout=20))


def deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize("where, files, args, needle", [
    ("spec", {"s.yaml": SPEC_HEAD + "x: " + deep(2000) + "\n"}, ["run", "s.yaml"], "s.yaml:5: invalid YAML: nested"),
    ("spec block style", {"s.yaml": SPEC_HEAD + "x:\n" + "".join("  " * i + "- \n" for i in range(1, 2000))},
     ["run", "s.yaml"], "invalid YAML: nested more than 100 levels deep"),
    ("case file", {"c.yaml": "id: a\ninput: " + deep(2000) + "\n"}, ["run", "--dataset", "c.yaml", "--model", "m"],
     "c.yaml:2: invalid YAML: nested"),
    ("suite", {"su.yaml": "tasks: " + deep(2000) + "\n"}, ["ab", "--suite", "su.yaml", "--arm-a", "balanced",
                                                           "--arm-b", "terse"], "su.yaml:1: invalid YAML: nested"),
    ("list key", {"s.yaml": SPEC_HEAD + "? [a, b]\n: 1\n"}, ["run", "s.yaml"],
     "s.yaml:5: invalid YAML: a key must be a plain value, not a list or mapping"),
    ("mapping key in a case", {"c.yaml": "id: a\ninput: x\n? {k: v}\n: 1\n"}, ["run", "--dataset", "c.yaml", "--model", "m"],
     "c.yaml:3: invalid YAML: a key must be a plain value"),
    ("jsonl nested 100,000 deep", {"s.yaml": "name: s\nadapters: [mock]\ndataset: p.jsonl\n",
                                   "p.jsonl": '{"id": "a", "text": "x", "tags": ' + deep(100_000) + "}\n"},
     ["run", "s.yaml"], "p.jsonl:1: invalid JSON: nested too deeply"),
    ("jsonl 5,000-digit integer", {"s.yaml": "name: s\nadapters: [mock]\ndataset: p.jsonl\n",
                                   "p.jsonl": '{"id": "a", "text": "x"}\n{"id": "b", "text": "y", "n": ' + "7" * 5000 + "}\n"},
     ["run", "s.yaml"], "p.jsonl:2: invalid JSON:"),
    ("empty case file", {"c.yaml": ""}, ["run", "--dataset", "c.yaml", "--model", "m"], "c.yaml: no cases in"),
    ("comment-only case file", {"c.yaml": "# nothing here\n---\n# nor here\n"},
     ["run", "--dataset", "c.yaml", "--model", "m"], "c.yaml: no cases in"),
    ("empty case folder file", {"cases/a.yaml": "# todo\n"}, ["run", "--dataset", "cases", "--model", "m"], "no cases in"),
    ("empty jsonl dataset", {"s.yaml": "name: s\nadapters: [mock]\ndataset: p.jsonl\n", "p.jsonl": "\n\n"},
     ["run", "s.yaml"], "s.yaml:3: dataset: no prompts"),
])
def test_bad_files_are_one_line_exit_2(tmp_path, where, files, args, needle):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    extra = ["--no-save"] if args[0] == "run" else []
    line = one_line_error(run_cli(*args, *extra, cwd=tmp_path, timeout=60))
    assert needle in line, (where, line)
    assert not (tmp_path / ".evalfarm").exists()


def test_valid_yaml_still_loads_with_its_lines(tmp_path):
    """The limits change nothing for ordinary files: the example spec runs, errors keep their lines."""
    assert run_cli("run", str(EXAMPLES / "smoke.yaml"), "--no-save").returncode == 0
    (tmp_path / "s.yaml").write_text(SPEC_HEAD + "  - id: b\n    text: x\n    expected_output_regex: '(open'\n")
    assert "s.yaml:7: prompts[1].expected_output_regex: regex does not compile" in \
        one_line_error(run_cli("run", "s.yaml", "--no-save", cwd=tmp_path))
    from evalfarm.spec.cases import load_cases

    (tmp_path / "m.yaml").write_text("cases:\n  - &b {id: base, input: hi, tags: [t]}\n  - {<<: *b, id: one}\n")
    assert [(p.id, p.text, p.tags) for p, _, _ in load_cases([tmp_path / "m.yaml"])] == \
        [("base", "hi", ["t"]), ("one", "hi", ["t"])]
    (tmp_path / "j.yaml").write_text(json.dumps({"id": "a", "input": "hi"}))  # JSON is YAML
    assert [p.id for p, _, _ in load_cases([tmp_path / "j.yaml"])] == ["a"]
