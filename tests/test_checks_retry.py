"""Pure parts: checks, case loading errors, Retry-After parsing, backoff, judge parsing."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from evalfarm.spec.cases import load_cases
from evalfarm.core.checks import run_checks
from evalfarm.errors import SpecError
from evalfarm.engine.judges import JudgeError, extract_json, parse_verdict
from evalfarm.providers.retry import RetryPolicy, backoff_s, parse_retry_after
from evalfarm.spec.models import Criterion, PromptSpec
from evalfarm.core.taxonomy import is_refusal


def verdicts(checks, output):
    return [(c["passed"], c["reason"]) for c in run_checks(PromptSpec(id="x", text="t", checks=checks), output)]


def test_each_check_kind():
    out = '{"materiality": "high", "n": 3}'
    assert all(ok for ok, _ in verdicts([{"kind": "json"}, {"kind": "one_of", "field": "materiality", "values": ["low", "high"]},
                                         {"kind": "contains", "value": "high"}, {"kind": "not_contains", "value": "TODO"},
                                         {"kind": "regex", "pattern": r"\d"}, {"kind": "equals", "field": "n", "value": 3},
                                         {"kind": "json_schema", "schema": {"type": "object", "required": ["n"]}},
                                         {"kind": "max_chars", "value": 100}], out))
    fails = verdicts([{"kind": "json"}, {"kind": "one_of", "field": "m", "values": ["a"]},
                      {"kind": "contains", "value": "zz"}, {"kind": "not_contains", "value": "plain"},
                      {"kind": "regex", "pattern": "^x"}, {"kind": "equals", "value": "other"},
                      {"kind": "json_schema", "schema": {"type": "object"}}, {"kind": "max_chars", "value": 3}],
                     "plain text")
    assert [ok for ok, _ in fails] == [False] * 8
    assert fails[0][1] == "output is not a single parseable JSON object"
    assert fails[7][1] == "10 chars > max 3"
    assert verdicts([{"kind": "one_of", "field": "m", "values": ["a"]}], '{"m": "b"}')[0] == \
        (False, "m='b' is not one of ['a']")
    assert verdicts([{"kind": "json_schema", "schema": {"type": "object", "properties": {"n": {"type": "string"}}}}],
                    '{"n": 1}')[0][1].startswith("json_schema: n: 1 is not of type 'string'")
    assert verdicts([{"kind": "json"}], '```json\n{"a": 1}\n```')[0][0]


def test_contains_json_finds_objects_inside_prose():
    prose = 'Sure. {"colour": "yellow", "count": 3} and {"size": "L"} {not json} {"a": [1, {"b": 2}]} [1, 2]'
    size = {"type": "object", "required": ["size"]}
    assert verdicts([{"kind": "contains_json"}], prose)[0] == (True, "3 JSON object(s) in the output")
    assert verdicts([{"kind": "contains_json", "schema": size}], prose)[0] == \
        (True, "a JSON object matching the schema among 3 found")
    assert verdicts([{"kind": "contains_json", "schema": {"type": "object", "required": ["nope"]}}], prose)[0] == \
        (False, "no JSON object matching the schema among 3 found")
    assert verdicts([{"kind": "contains_json", "absent": True, "schema": size}], prose)[0][0] is False
    assert verdicts([{"kind": "contains_json"}], "a list [1, 2] and {broken: json} are no objects")[0] == \
        (False, "no JSON object in the output")
    assert verdicts([{"kind": "contains_json", "absent": True}], "plain text")[0][0] is True
    assert verdicts([{"kind": "contains_json"}], '{"cut": "short')[0][0] is False  # strict JSON only
    assert verdicts([{"kind": "contains_json"}], "{" * 200_000)[0][0] is False  # bounded work on hostile output
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        PromptSpec(id="x", text="t", checks=[{"kind": "contains_json", "schema": {"type": 5}}])


def test_case_file_errors_name_file_line_field(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("id: a\ninput: hi\ncriteria:\n  - id: x\n    weight: -1\n    description: d\n")
    with pytest.raises(SpecError) as e:
        load_cases([p])
    assert str(e.value).startswith(f"{p}:5: criteria[0].weight: Input should be greater than 0")
    p.write_text("- id: a\n  input: x\n- id: b\n  input: y\n  checks:\n    - kind: jsn\n")
    with pytest.raises(SpecError) as e:
        load_cases([p])
    assert f"{p}:6: checks[0]" in str(e.value) and "jsn" in str(e.value)
    p.write_text("id: a\ninput: x\n---\nid: b\ninput: y\nbogus: 1\n")
    with pytest.raises(SpecError) as e:
        load_cases([p])
    assert str(e.value).startswith(f"{p}:6: bogus: unknown field")


def test_multi_document_and_directory(tmp_path):
    (tmp_path / "a.yaml").write_text("id: a\ninput: x\n---\nid: b\ninput: y\n")
    (tmp_path / "b.yml").write_text("cases:\n  - id: c\n    input: z\n    tags: [t]\n")
    got = load_cases([tmp_path])
    assert [p.id for p, _, _ in got] == ["a", "b", "c"] and got[2][0].tags == ["t"]


def test_retry_after_parsing():
    assert parse_retry_after("3") == 3.0 and parse_retry_after("0.5") == 0.5
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after(format_datetime(now + timedelta(seconds=7), usegmt=True), now=now) == 7.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=7), usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None and parse_retry_after("-4") == 0.0


def test_backoff_is_bounded_exponential_with_jitter():
    rng = random.Random(1)
    pol = RetryPolicy(base_s=0.5, cap_s=4.0)
    samples = {a: [backoff_s(a, pol, rng) for _ in range(500)] for a in range(6)}
    for a, xs in samples.items():
        assert max(xs) <= min(4.0, 0.5 * 2 ** a) and min(xs) >= 0
    assert sum(samples[3]) / 500 > sum(samples[0]) / 500 * 4


def test_judge_parsing_is_robust():
    crit = [Criterion(id="a", weight=3, description="d"), Criterion(id="b", weight=1, description="d")]
    text = 'Sure! Here you go:\n```json\n{"criteria": [{"id": "a", "verdict": "pass"}, {"id": "b", "verdict": "FAIL"}]}\n```'
    assert parse_verdict(text, crit).score == 0.75
    prose = 'My verdict is {"criteria": {"a": "pass", "b": {"verdict": "pass"}}} as requested.'
    assert parse_verdict(prose, crit).score == 1.0
    with pytest.raises(JudgeError, match="no verdict for criterion 'b'"):
        parse_verdict('{"criteria": [{"id": "a", "verdict": "pass"}]}', crit)
    with pytest.raises(JudgeError):
        extract_json("no json here")
    assert parse_verdict('{"score": 1.7}', []).score == 1.0


def test_refusal_detection():
    assert is_refusal("I'm sorry, but I can't help with that.")
    assert is_refusal("I cannot assist with this request.")
    assert not is_refusal("Sorry for the delay; here is the summary you asked for.")
