"""Images with a prompt (``images:`` in the spec) through every wire that takes them, to a real
`evalfarm mock-provider` over HTTP: the mock checks each image part in its protocol's own shape
(OpenAI image_url, Responses input_image, Anthropic image source, Gemini inline_data/file_data, Bedrock
Converse bytes) and echoes a mark of what it got; a wire that takes text only fails the item, never
sends the text alone; a bad image is one line naming the field."""
from __future__ import annotations

import base64
import json

import yaml

from conftest import run_cli

KEY = "sk-images-0123"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()  # 40 bytes
URL = "https://example.com/cat.jpg"


def _run(tmp_path, spec: dict, **env: str):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    ran = run_cli("run", str(path), "-o", str(tmp_path / "r.json"), "--state-dir", str(tmp_path / "st"), **env)
    report = json.loads((tmp_path / "r.json").read_text()) if (tmp_path / "r.json").exists() else None
    return ran, report


def test_each_wire_sends_the_images_in_its_protocols_shape(provider, tmp_path):
    mock = provider("--api-key", KEY)
    root = mock.url.removesuffix("/v1")
    adapters = [
        {"id": "openai", "model": "gpt-v", "base_url": mock.url, "api_key_env": "OPENAI_API_KEY"},
        {"id": "responses", "provider": "openai-responses", "model": "gpt-r", "base_url": mock.url,
         "api_key_env": "OPENAI_API_KEY"},
        {"id": "claude", "provider": "anthropic", "model": "claude-x", "base_url": mock.url,
         "api_key_env": "ANTHROPIC_API_KEY"},
        {"id": "gemini", "provider": "gemini", "model": "gemini-x", "base_url": root + "/v1beta",
         "api_key_env": "GEMINI_API_KEY"},
        {"id": "azure", "provider": "azure", "model": "dep1", "base_url": root + "/openai/deployments/dep1",
         "api_version": "2024-10-21", "api_key_env": "AZURE_API_KEY"},
        {"id": "bedrock", "provider": "bedrock", "model": "us.x-v1:0", "base_url": root,
         "api_key_env": "AWS_BEARER_TOKEN_BEDROCK"},
    ]
    spec = {"name": "images", "adapters": adapters, "prompts": [
        {"id": "data", "text": "what is this", "images": [{"data": PNG, "media_type": "image/png"}]},
        {"id": "url", "text": "and this", "images": [{"url": URL}]}]}
    keys = dict.fromkeys(("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "AZURE_API_KEY",
                          "AWS_BEARER_TOKEN_BEDROCK"), KEY)
    ran, report = _run(tmp_path, spec, **keys)
    got = {(o["adapter"], o["prompt_id"]): o for o in report["outcomes"]}
    shapes = {"openai": "image_url", "azure": "image_url", "responses": "input_image", "claude": "anthropic",
              "gemini": "gemini", "bedrock": "bedrock"}
    for adapter, shape in shapes.items():
        data = got[(adapter, "data")]
        assert data["error"] is None and f"[image {shape} image/png 40 bytes]" in data["output"], (adapter, data)
        assert data["output"].startswith("what is this"), data["output"]
        url = got[(adapter, "url")]
        if adapter == "bedrock":  # Converse takes bytes only: the item errors, the text is not sent alone
            assert url["error"] and "not a URL" in url["error"]["message"], url
        else:
            assert url["error"] is None and f"[image {shape} url {URL}]" in url["output"], (adapter, url)
    assert report["per_adapter"]["bedrock"]["errors"] == 1 and report["per_adapter"]["openai"]["errors"] == 0


def test_a_text_only_wire_fails_the_item_instead_of_dropping_the_image(provider, tmp_path):
    mock = provider()
    spec = {"name": "http-img", "adapters": [
        {"id": "http", "provider": "http", "model": "app", "base_url": mock.url.removesuffix("/v1") + "/chat/api",
         "http": {"body": {"q": "{{prompt}}"}, "response_path": "json.choices[0].message.content"}}],
        "prompts": [{"id": "p", "text": "look", "images": [{"url": URL}]}]}
    ran, report = _run(tmp_path, spec)
    (o,) = report["outcomes"]
    assert o["error"] and "takes text only" in o["error"]["message"] and "1 image(s)" in o["error"]["message"]
    assert mock.stats()["requests"] == 0  # nothing was sent without its image


def test_a_bad_image_is_one_line_naming_the_field(tmp_path):
    for image, says in (({"url": "file:///etc/passwd"}, "http:// or https://"),
                        ({"data": "not base64!", "media_type": "image/png"}, "base64"),
                        ({"data": PNG}, "media_type"),
                        ({"data": PNG, "media_type": "image/tiff"}, "media_type")):
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump({"name": "bad", "adapters": ["mock"],
                                        "prompts": [{"id": "p", "text": "t", "images": [image]}]}))
        ran = run_cli("run", str(path), "--no-save")
        assert ran.returncode == 2, (image, ran.stderr)
        line = ran.stderr.strip().splitlines()[-1]
        assert "images" in line and says in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
