"""`evalfarm import promptfoo` of chat prompts with images (the shapes promptfoo's examples use: Anthropic
image blocks, OpenAI image_url, Bedrock Converse bytes, a Gemini text prompt whose line is an image var)
and image vars read from files, then the imported spec run against a real `evalfarm mock-provider`,
each adapter on its own wire: the images reach the server in each protocol's shape."""
from __future__ import annotations

import base64
import json
import re

import yaml

from conftest import run_cli

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 56  # 64 bytes; the importer knows an image by its first bytes

CONFIG = """\
prompts:
  - file://anthropic.json
  - file://openai.json
  - file://converse.json
  - "{{photo}}\\nDescribe it."
providers:
  - anthropic:messages:claude-x
  - google:gemini-x
  - id: bedrock:converse:us.x-v1:0
    config: {region: us-east-1}
tests:
  - vars: {photo: file://tiny.png, topic: cats}
"""
PROMPTS = {
    "anthropic.json": [{"role": "user", "content": [
        {"type": "text", "text": "About {{topic}}:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "{{photo}}"}}]}],
    "openai.json": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": "{{photo}}"}}]}],
    "converse.json": [{"role": "user", "content": [
        {"image": {"format": "png", "source": {"bytes": "{{photo}}"}}}, {"text": "Which animal?"}]}],
}


def _import(tmp_path, config: str = CONFIG):
    (tmp_path / "tiny.png").write_bytes(PNG)
    for name, messages in PROMPTS.items():
        (tmp_path / name).write_text(json.dumps(messages))
    (tmp_path / "promptfooconfig.yaml").write_text(config)
    out = tmp_path / "spec.yaml"
    return run_cli("import", "promptfoo", str(tmp_path / "promptfooconfig.yaml"), "-o", str(out)), out


def test_chat_prompts_with_images_import_and_reach_each_wire(provider, tmp_path):
    done, out = _import(tmp_path)
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(out.read_text())
    data = base64.b64encode(PNG).decode()
    prompts = {p["text"]: p for p in spec["prompts"]}
    assert set(prompts) == {"About cats:", "What is it?", "Which animal?", "Describe it."}
    for p in prompts.values():
        assert p["images"] == [{"data": data, "media_type": "image/png"}], p
    assert prompts["What is it?"]["system"] == "Be brief."

    mock = provider()
    root = mock.url.removesuffix("/v1")
    for a in spec["adapters"]:  # the same paths, on the mock's host
        a["base_url"] = re.sub(r"^https://[^/]+", root, a["base_url"])
    out.write_text(yaml.safe_dump(spec))
    keys = dict.fromkeys(("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "AWS_BEARER_TOKEN_BEDROCK"), "k")
    ran = run_cli("run", str(out), "-o", str(tmp_path / "r.json"), "--state-dir", str(tmp_path / "st"), **keys)
    assert ran.returncode == 0, ran.stderr
    outcomes = json.loads((tmp_path / "r.json").read_text())["outcomes"]
    assert len(outcomes) == 12 and not [o["error"] for o in outcomes if o["error"]]
    shape = {"anthropic:messages:claude-x": "anthropic", "google:gemini-x": "gemini",
             "bedrock:converse:us.x-v1:0": "bedrock"}
    for o in outcomes:
        assert f"[image {shape[o['adapter']]} image/png 64 bytes]" in o["output"], o


def test_an_image_var_inside_a_line_of_text_is_refused_not_sent_as_base64(tmp_path):
    done, out = _import(tmp_path, CONFIG.replace('"{{photo}}\\nDescribe it."', '"Describe {{photo}} please"'))
    assert done.returncode == 2 and not out.exists()
    assert "an image var inside the prompt's text" in done.stderr, done.stderr


def test_a_var_file_that_is_not_an_image_is_refused(tmp_path):
    (tmp_path / "fake.jpg").write_bytes(b"not an image at all")
    done, out = _import(tmp_path, CONFIG.replace("file://tiny.png", "file://fake.jpg"))
    assert done.returncode == 2 and "fake.jpg: not a JPEG, PNG, GIF or WebP image" in done.stderr, done.stderr
