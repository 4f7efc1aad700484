"""Every bad input: one line on stderr naming file, line and field; exit 2; nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

GOOD = """\
name: s
adapters: [mock]
prompts:
  - id: a
    text: hello
"""

CASES = {
    "malformed_yaml": ({"spec.yaml": "name: s\nadapters: [mock\nprompts: []\n"}, "spec.yaml:3: invalid YAML"),
    "unknown_key": ({"spec.yaml": GOOD + "promts: []\n"}, "spec.yaml:6: promts: unknown field (did you mean 'prompts'?); allowed fields"),
    "unknown_prompt_key": ({"spec.yaml": GOOD + "    expected: x\n"},
                           "spec.yaml:6: prompts[0].expected: unknown field"),
    "wrong_type": ({"spec.yaml": GOOD + "trials: many\n"}, "spec.yaml:6: trials: Input should be a valid integer"),
    "bad_regex": ({"spec.yaml": GOOD + "    expected_output_regex: '(unclosed'\n"},
                  "spec.yaml:6: prompts[0].expected_output_regex: regex does not compile"),
    "threshold_too_high": ({"spec.yaml": GOOD + "thresholds:\n  golden_pass_rate_min: 1.5\n"},
                           "spec.yaml:7: thresholds.golden_pass_rate_min: Input should be less than or equal to 1"),
    "missing_dataset": ({"spec.yaml": GOOD + "dataset: nope.jsonl\n"},
                        "spec.yaml:6: dataset: dataset file not found"),
    "bad_jsonl_line": ({"spec.yaml": GOOD + "dataset: p.jsonl\n",
                        "p.jsonl": "".join(f'{{"id": "b{i}", "text": "x"}}\n' for i in range(6)) + '{"id": "c", "text": }\n'},
                       "p.jsonl:7: invalid JSON:"),
    "jsonl_bad_field": ({"spec.yaml": GOOD + "dataset: p.jsonl\n",
                         "p.jsonl": '{"id": "b", "text": "x"}\n{"id": "c", "txt": "y"}\n'},
                        "p.jsonl:2: text: required field is missing"),
    "duplicate_inline": ({"spec.yaml": GOOD + "  - id: a\n    text: again\n"},
                         "spec.yaml:6: id: duplicate prompt id 'a' (first defined at spec.yaml:4)"),
    "duplicate_across_dataset": ({"spec.yaml": GOOD + "dataset: p.jsonl\n", "p.jsonl": '\n{"id": "a", "text": "x"}\n'},
                                 "p.jsonl:2: id: duplicate prompt id 'a' (first defined at"),
    "empty_adapters": ({"spec.yaml": "name: s\nadapters: []\nprompts:\n  - {id: a, text: x}\n"},
                       "spec.yaml:2: adapters: List should have at least 1 item"),
    "unknown_adapter": ({"spec.yaml": "name: s\nadapters: [mock, claude]\nprompts:\n  - {id: a, text: x}\n"},
                        "spec.yaml:2: adapters[1]: unknown adapter 'claude'"),
    "non_utf8": ({"spec.yaml": b"name: s\nadapters: [mock]\nprompts:\n  - id: a\n    text: caf\xe9\n"},
                 "spec.yaml:5: not valid UTF-8 (byte 0xe9)"),
    "judge_min_without_judge": ({"spec.yaml": GOOD + "thresholds:\n  judge_score_min: 0.5\n"},
                                "spec.yaml:1: thresholds.judge_score_min is set but there is no 'judge' block"),
    "no_prompts": ({"spec.yaml": "name: s\nadapters: [mock]\n"},
                   "spec.yaml:1: the spec needs inline 'prompts' or a 'dataset'"),
    "missing_name": ({"spec.yaml": "adapters: [mock]\nprompts:\n  - {id: a, text: x}\n"},
                     "spec.yaml:1: name: required field is missing"),
    "duplicate_yaml_key": ({"spec.yaml": GOOD + "name: t\n"}, "spec.yaml:6: invalid YAML: duplicate key 'name'"),
    "not_a_mapping": ({"spec.yaml": "- just\n- a list\n"}, "spec.yaml:1: the spec must be a YAML mapping"),
    "spec_missing": ({}, "spec.yaml: file not found"),
    "judge_weight": ({"spec.yaml": GOOD + "judge:\n  model: m\n  provider: mock\n  weight: 2\n"},
                     "spec.yaml:9: judge.weight: Input should be less than or equal to 1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path: Path, case: str) -> None:
    files, expected = CASES[case]
    for name, body in files.items():
        (tmp_path / name).write_bytes(body if isinstance(body, bytes) else body.encode())
    state = tmp_path / "state"
    out = tmp_path / "out.json"
    res = run_cli("run", "spec.yaml", "--state-dir", str(state), "--output", str(out), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert expected in lines[0], lines[0]
    assert not state.exists() and not out.exists()


def test_good_spec_passes_the_same_path(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(GOOD)
    res = run_cli("run", "spec.yaml", "--state-dir", "st", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["per_adapter"]["mock"]["golden_pass_rate"] == 1.0


def test_bad_cli_usage_exits_2(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(GOOD)
    res = run_cli("run", "spec.yaml", "--trials", "0", cwd=tmp_path)
    assert res.returncode == 2
    assert "--trials" in res.stderr
    res = run_cli("diff", "nope-a", "nope-b", cwd=tmp_path)
    assert res.returncode == 2
    assert "run 'nope-a' not found" in res.stderr.strip().splitlines()[-1]
