"""`evalfarm import promptfoo` of chat prompts with image parts (the shapes promptfoo's own examples use:
claude-vision, openai-vision, openai-responses image input, bedrock converse images; an image file var on
its own line of a text prompt, as google-aistudio-gemini's image example), then the imported spec run
against a real `evalfarm mock-provider`: each image reaches the server in its wire's own shape."""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import yaml

from conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "promptfoo_images"
PIXEL = base64.b64encode((FIXTURES / "pixel.png").read_bytes()).decode()
URL = "https://example.com/cat.png"

# one config per wire (evalfarm runs every prompt on every adapter): prompt, provider, the image as sent
CASES = {
    "anthropic": ("file://anthropic_prompt.json", "anthropic:messages:claude-x", "What is in this image?", "data"),
    "openai": ("file://openai_prompt.json", "openai:chat:gpt-x", "What is it?", "url"),
    "responses": ("file://responses_prompt.json", "openai:responses:gpt-r", "Describe it.", "url"),
    "bedrock": ("file://bedrock_prompt.json", "bedrock:us.anthropic.claude-x-v1:0", "What animal is this?", "data"),
    "gemini": ('"{{image}}\\nWhat color is this pixel?"', "google:gemini-x", "What color is this pixel?", "data"),
}


def test_image_parts_import_and_reach_the_mock_in_each_wire_shape(provider, tmp_path):
    for f in FIXTURES.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    mock = provider()
    root = mock.url.removesuffix("/v1")
    keys = dict.fromkeys(("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENAI_API_KEY", "AWS_BEARER_TOKEN_BEDROCK"), "k")
    data_url = f"data:image/png;base64,{PIXEL}"
    for name, (prompt, pid, text, kind) in CASES.items():
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"prompts: [{prompt}]\nproviders: ['{pid}']\ntests:\n"
                          f"  - vars: {{image: file://pixel.png, url: '{URL}', question: 'What is it?'}}\n")
        out = tmp_path / f"{name}.spec.yaml"
        done = run_cli("import", "promptfoo", str(config), "-o", str(out))  # strict: every part maps
        assert done.returncode == 0, done.stderr
        spec = yaml.safe_load(out.read_text())
        assert [(p["text"], p["images"]) for p in spec["prompts"]] == [(text, [data_url if kind == "data" else URL])]
        for a in spec["adapters"]:
            a["base_url"] = re.sub(r"^https://[^/]+", root, a["base_url"])
        out.write_text(yaml.safe_dump(spec))
        report = tmp_path / f"{name}.json"
        ran = run_cli("run", str(out), "-o", str(report), "--json", "--state-dir", str(tmp_path / f"st-{name}"),
                      EVALFARM_KEY_ENV_ALLOW=",".join(keys), **keys)
        assert ran.returncode == 0, ran.stderr
        outcomes = json.loads(report.read_text())["outcomes"]
        assert len(outcomes) == 1 and not outcomes[0]["error"], outcomes
    short = PIXEL[:64] + "..." if len(PIXEL) > 64 else PIXEL
    images = {r["protocol"]: r["images"] for r in mock.stats_requests()}
    assert images == {
        "anthropic": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": short}}],
        "openai": [{"type": "image_url", "image_url": {"url": URL}}],
        "responses": [{"type": "input_image", "image_url": URL}],
        "bedrock": [{"image": {"format": "png", "source": {"bytes": short}}}],
        "gemini": [{"inlineData": {"mimeType": "image/png", "data": short}}],
    }, images


def test_unsupported_parts_and_bad_images_are_one_line_refusals(tmp_path):
    (tmp_path / "audio.json").write_text(json.dumps([{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "input_audio", "input_audio": {"data": "x"}}]}]))
    (tmp_path / "img.json").write_text(json.dumps([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "{{u}}"}}]}]))
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text("prompts: [file://audio.json, file://img.json]\nproviders: [openai:gpt-x]\n"
                      "tests:\n  - vars: {u: not-an-image}\n")
    refused = run_cli("import", "promptfoo", str(config), "-o", str(tmp_path / "s.yaml"))
    assert refused.returncode == 2
    errors = [ln for ln in refused.stderr.splitlines() if ln.startswith("evalfarm: error:")]
    text = "\n".join(errors)
    assert "user message part 1 (type 'input_audio'): only text and image parts" in text
    assert "image 'not-an-image': not an http(s) URL, a data: URL or base64 of a PNG" in text


def test_spec_images_are_validated_before_the_run(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "adapters": [{"id": "a", "model": "m"}],
                                   "prompts": [{"id": "p", "text": "t", "images": ["ftp://x/y.png"]}]}))
    done = run_cli("run", str(bad), "--state-dir", str(tmp_path / "st"))
    assert done.returncode != 0 and "images[0]: an image must be an http(s) URL or a data:image/" in done.stderr


def test_transform_response_arrow_functions_import_as_paths_and_run(provider, tmp_path):
    """promptfoo's redteam-tracing-example and redteam-auth transforms: (json, text) => json?.a || ... || text
    and (json) => json become response_path alternatives (no JavaScript runs); anything else is refused."""
    mock = provider()
    root = mock.url.removesuffix("/v1")
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(f"""\
prompts: ["Say {{{{w}}}}"]
providers:
  - id: {root}/chat
    label: fallback
    config:
      body: {{q: "{{{{prompt}}}}"}}
      transformResponse: '(json, text) => json?.missing || json?.response || text'
  - id: {root}/chat
    label: whole
    config: {{body: {{q: "{{{{prompt}}}}"}}, transformResponse: (json) => json}}
tests: [{{vars: {{w: hello}}}}]
""")
    out = tmp_path / "spec.yaml"
    done = run_cli("import", "promptfoo", str(config), "-o", str(out))
    assert done.returncode == 0, done.stderr
    paths = {a["id"]: a["http"]["response_path"] for a in yaml.safe_load(out.read_text())["adapters"]}
    assert paths == {"fallback": "json?.missing || json?.response || text", "whole": "json"}
    ran = run_cli("run", str(out), "-o", str(tmp_path / "r.json"), "--json", "--state-dir", str(tmp_path / "st"))
    assert ran.returncode == 0, ran.stderr
    outputs = {o["adapter"]: o["output"] for o in json.loads((tmp_path / "r.json").read_text())["outcomes"]}
    assert "hello" in outputs["fallback"] and not outputs["fallback"].startswith("{"), outputs
    assert json.loads(outputs["whole"])["response"] == outputs["fallback"], outputs
    config.write_text(config.read_text().replace("(json) => json", "(json) => json.a.map(x => x)"))
    refused = run_cli("import", "promptfoo", str(config), "-o", str(tmp_path / "s2.yaml"))
    assert refused.returncode == 2 and "transformResponse: only a JSON path" in refused.stderr
