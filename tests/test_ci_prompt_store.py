"""The versioned prompt store: resolution (flag, pin, pointer file, symlink), YAML parts, hashes, errors."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from evalfarm import Runner
from evalfarm.runs.registry import Registry, check_prompt_unchanged
from evalfarm.errors import SpecError
from evalfarm.spec.load import open_spec
from evalfarm.spec.prompts import dataset_hash, resolve, version_for


def apply_prompt_version(spec_path: Path, flag: str | None, state_dir: Path | None = None):
    """What `evalfarm run` does: the spec file, the version it uses (checked against the registry)."""
    sf = open_spec(spec_path)
    version = version_for(sf.spec.prompt, flag, sf.base_dir, spec_path=sf.path)
    if version is not None and state_dir is not None:
        check_prompt_unchanged(state_dir, version)
    return sf.with_source(sf.source.with_version(version)), version.info() if version else None


def project(tmp: Path, prompt_line: str = "prompt: triage\n") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "s.yaml").write_text("name: s\nadapters: [mock]\n" + prompt_line
                                + "prompts:\n  - {id: a, text: headline one}\n  - {id: b, text: headline two}\n")
    store = tmp / "prompts" / "triage"
    store.mkdir(parents=True)
    (store / "v1.txt").write_text("You triage headlines.")
    (store / "v2.yaml").write_text("system: You triage headlines as JSON.\nuser: |-\n  Headline: {input}\n  JSON:\n")
    return tmp / "s.yaml"


def test_pointer_file_flag_and_pin(tmp_path):
    spec_path = project(tmp_path)
    (tmp_path / "prompts" / "triage" / "current").write_text("v2\n")
    spec, info = apply_prompt_version(spec_path, None)
    assert info["version"] == "v2" and info["resolved_by"] == "pointer"
    raw = (tmp_path / "prompts" / "triage" / "v2.yaml").read_bytes()
    assert info["hash"] == "sha256:" + hashlib.sha256(raw).hexdigest()
    [a, b] = list(spec.source)
    assert a.system == "You triage headlines as JSON." and a.text == "Headline: headline one\nJSON:"
    spec, info = apply_prompt_version(spec_path, "v1")
    assert info["resolved_by"] == "flag" and list(spec.source)[1].system == "You triage headlines."
    assert list(spec.source)[1].text == "headline two"  # a .txt version is the system prompt only
    pinned = project(tmp_path / "p", "prompt: triage@v1\n")
    _, info = apply_prompt_version(pinned, None)
    assert info["version"] == "v1" and info["resolved_by"] == "pin"


def test_symlink_pointer(tmp_path):
    spec_path = project(tmp_path)
    (tmp_path / "prompts" / "triage" / "current").symlink_to("v1.txt")
    assert apply_prompt_version(spec_path, None)[1]["version"] == "v1"


def test_the_version_changes_what_is_sent_and_the_spec_hash_but_not_the_dataset_hash(tmp_path):
    spec_path = project(tmp_path)
    s1, _ = apply_prompt_version(spec_path, "v1")
    s2, _ = apply_prompt_version(spec_path, "v2")
    seen = []
    report = Runner(executor=lambda adapter, p: seen.append((p.system, p.text)) or "ok").run(s2).to_dict()
    assert sorted(seen) == [("You triage headlines as JSON.", "Headline: headline one\nJSON:"),
                            ("You triage headlines as JSON.", "Headline: headline two\nJSON:")]
    r1 = Runner(executor=lambda a, p: "ok").run(s1).to_dict()
    assert r1["spec_hash"] != report["spec_hash"]
    assert dataset_hash(s1.source.selected()) == dataset_hash(s2.source.selected())


def test_no_prompt_no_flag_is_a_no_op_and_a_spec_without_prompt_uses_the_only_store(tmp_path):
    spec_path = project(tmp_path, prompt_line="")
    spec, info = apply_prompt_version(spec_path, None)
    assert info is None and list(spec.source)[0].system is None
    _, info = apply_prompt_version(spec_path, "v1")  # e.g. a --dataset run: the one prompt
    assert info["name"] == "triage"
    (tmp_path / "prompts" / "other").mkdir()
    with pytest.raises(SpecError, match="add 'prompt: NAME' to the spec .*prompts in .*: other, triage"):
        apply_prompt_version(spec_path, "v1")


@pytest.mark.parametrize("content, match", [
    ("system: a\nuser: no placeholder\n", r"v3\.yaml:2: user: the user template must contain \{input\}"),
    ("system: a\nmodel: x\n", r"v3\.yaml:2: model: unknown field; allowed fields are system, user, description"),
    ("system: [a]\n", r"v3\.yaml:1: system: must be a string"),
    ("- a\n", r"v3\.yaml:1: a YAML prompt is a mapping"),
    ("description: only\n", r"needs 'system' and/or 'user'"),
])
def test_bad_yaml_versions_name_file_line_field(tmp_path, content, match):
    spec_path = project(tmp_path)
    (tmp_path / "prompts" / "triage" / "v3.yaml").write_text(content)
    with pytest.raises(SpecError, match=match):
        apply_prompt_version(spec_path, "v3")


def test_resolution_errors(tmp_path):
    spec_path = project(tmp_path)
    with pytest.raises(SpecError, match="no version given and no pointer .*current"):
        apply_prompt_version(spec_path, None)
    (tmp_path / "prompts" / "triage" / "v1.yaml").write_text("system: x\n")
    with pytest.raises(SpecError, match="version 'v1' is ambiguous: v1.txt, v1.yaml"):
        resolve(tmp_path, "triage", "v1")
    with pytest.raises(SpecError, match="prompt store not found"):
        resolve(tmp_path, "nope", "v1")
    (tmp_path / "prompts" / "triage" / "current").write_text("v1\nv2\n")
    with pytest.raises(SpecError, match="current:1: the pointer must be one line"):
        resolve(tmp_path, "triage")


def test_changed_file_under_a_recorded_version_is_detected(tmp_path):
    spec_path = project(tmp_path)
    state = tmp_path / "st"
    spec, info = apply_prompt_version(spec_path, "v1", state_dir=state)
    report = Runner().run(spec).to_dict()
    Registry(state).record(report, tmp_path / "r.json", prompt=info)
    apply_prompt_version(spec_path, "v1", state_dir=state)  # unchanged: fine
    (tmp_path / "prompts" / "triage" / "v1.txt").write_text("You triage headlines, briefly.")
    with pytest.raises(SpecError) as exc:
        apply_prompt_version(spec_path, "v1", state_dir=state)
    msg = str(exc.value)
    assert msg.startswith(str(tmp_path / "prompts" / "triage" / "v1.txt") + ": prompt triage@v1 changed since run "
                          + report["run_id"])
    assert exc.value.exit_code == 2
    apply_prompt_version(spec_path, "v2", state_dir=state)  # other versions are unaffected
