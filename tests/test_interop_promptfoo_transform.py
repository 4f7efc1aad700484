"""`evalfarm import promptfoo` of HTTP targets whose ``transformResponse`` is an arrow function returning a
path (promptfoo's redteam-tracing-example and redteam-auth examples): imported as ``response_path``
alternatives, nothing evaluated, and run against a real `evalfarm mock-provider`."""
from __future__ import annotations

import json

import yaml

from conftest import run_cli


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
