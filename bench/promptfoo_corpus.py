"""How much of promptfoo's own ``examples/`` imports and runs: ``evalfarm import promptfoo`` on every
config (strict, then ``--skip-unsupported``), refusals counted by reason, and every imported spec run
against one real ``evalfarm mock-provider`` (items and errors counted from each report).

    python bench/promptfoo_corpus.py /tmp/pf-examples [--json out.json] [--no-run]

A *config* is every ``.yaml``/``.yml`` under the corpus that parses as a mapping naming
``providers`` or ``targets`` (what ``promptfoo eval -c`` needs to know whom to ask). The corpus is
promptfoo's repository's ``examples/`` folder, copied as it is (configs and the files they name);
it is not committed here. Imports run in this process through the real click command (the same
code path as the CLI, without 400 interpreter start-ups); runs are ``evalfarm run`` subprocesses,
two at a time, each with its own state dir, against the mock (``--base-url``, ``--judge-base-url``,
``EVAL_EMBEDDINGS_BASE_URL`` for ``similar``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from click.testing import CliRunner

from evalfarm.cli import main as cli_main
from evalfarm.providers.access import DEFAULT_KEY_ENVS

KEY_ENVS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VERTEX_API_KEY",
            "OPENROUTER_API_KEY", "MISTRAL_API_KEY", "AZURE_API_KEY", "AZURE_OPENAI_API_KEY", "EVAL_API_KEY")


def configs(root: Path) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".yaml", ".yml") or not path.is_file() or "node_modules" in path.parts:
            continue
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - a file that is not YAML is not a config
            continue
        if isinstance(data, dict) and ("providers" in data or "targets" in data):
            out.append(path)
    return out


_FINDING = re.compile(r"^evalfarm: (?:skipped|error): (?P<rest>.*)$")


def reason(line: str) -> str:
    """A refusal line as a reason class: 'provider <prefix>', 'assert <type>', or the field's kind."""
    rest = _FINDING.match(line).group("rest")
    rest = re.sub(r"^.*?\.(?:ya?ml|json|txt|md|j2)(?::\d+)?: ", "", rest, count=1)  # the file:line prefix
    m = re.search(r"provider '([^']+)'", rest)
    if m:
        pid = m.group(1)
        if pid.startswith(("http://", "https://")):
            return "provider http(s) URL"
        parts = pid.split(":")
        return "provider " + (":".join(parts[:2]) if parts[0] == "openai" and len(parts) > 2 else parts[0])
    m = re.search(r"assertion type '([^']+)'", rest)
    if m:
        return f"assert {m.group(1)}"
    m = re.search(r"(provider key|config\.\w+|top-level key '\w+'|test key '\w+'|prompt key '\w+'|assertion key "
                  r"'\w+')", rest)
    if m:
        return re.sub(r"^config\.", "provider config.", m.group(1))
    if "function reference runs code" in rest or "runs code" in rest:
        return "code (prompt/test function)"
    if "file not found" in rest:
        return "file not found"
    return re.sub(r"\s+", " ", rest.split(": ", 2)[-1])[:60]


def import_one(runner: CliRunner, config: Path, out: Path, skip: bool) -> tuple[int, list[str], str]:
    args = ["import", "promptfoo", str(config), "-o", str(out)] + (["--skip-unsupported"] if skip else [])
    res = runner.invoke(cli_main, args, catch_exceptions=True)
    lines = [ln for ln in res.stderr.splitlines() if _FINDING.match(ln)]
    refused = [ln for ln in lines if "unsupported feature(s) listed above" not in ln
               and not re.search(r"no provider could be imported|no prompt could be imported|does not validate",
                                 ln) and not ln.startswith("evalfarm: error: " + str(config) + ": no such")]
    final = next((ln for ln in reversed(lines) if re.search(
        r"no provider could be imported|no prompt could be imported|does not validate|nothing written|"
        r"a red-team config is not an eval", ln)), "")
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        final = f"crash {type(res.exception).__name__}: {res.exception}"
    return res.exit_code, refused, final


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(spec: Path, url: str, work: Path) -> dict:
    report = work / "report.json"
    # every key variable the spec names is set, and allowed on this host as the import's note tells the user to
    # (GITHUB_TOKEN, HF_TOKEN, ... are not in evalfarm's default allow-list)
    names = {a.get("api_key_env") for a in yaml.safe_load(spec.read_text())["adapters"]} - {None}
    env = dict(os.environ, **{k: "unused" for k in (*KEY_ENVS, *names)}, EVAL_EMBEDDINGS_BASE_URL=url)
    if names - set(DEFAULT_KEY_ENVS):
        env["EVALFARM_KEY_ENV_ALLOW"] = ",".join(sorted({*DEFAULT_KEY_ENVS, *names}))
    env.pop("EVAL_BASE_URL", None)
    env.pop("EVAL_JUDGE_BASE_URL", None)
    proc = subprocess.run([sys.executable, "-m", "evalfarm.cli", "run", str(spec), "--base-url", url, "--judge-base-url",
                           url, "--state-dir", str(work / "st"), "-o", str(report), "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    if not report.is_file():
        return {"exit": proc.returncode, "items": 0, "errors": None, "stderr": proc.stderr.strip()[-400:]}
    outcomes = json.loads(report.read_text())["outcomes"]
    errors = [o["error"] for o in outcomes if o.get("error")]
    return {"exit": proc.returncode, "items": len(outcomes), "errors": len(errors),
            "first_error": (str(errors[0])[:300] if errors else None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--json", type=Path, help="write every config's result here")
    ap.add_argument("--no-run", action="store_true", help="import only")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    found = configs(args.corpus)
    runner = CliRunner()
    work = Path(tempfile.mkdtemp(prefix="pf-corpus-"))
    results = []
    started = time.perf_counter()
    for i, config in enumerate(found):
        rel = str(config.relative_to(args.corpus))
        strict_exit, strict_refused, _ = import_one(runner, config, work / f"{i}.strict.yaml", skip=False)
        spec = work / f"{i}.yaml"
        skip_exit, skip_refused, final = import_one(runner, config, spec, skip=True)
        results.append({"config": rel, "strict": strict_exit == 0, "skip": skip_exit == 0 and spec.is_file(),
                        "reasons": sorted({reason(ln) for ln in strict_refused}), "final": final,
                        "spec": str(spec) if skip_exit == 0 else None})
    import_s = time.perf_counter() - started

    runs = {}
    if not args.no_run:
        port = free_port()
        url = f"http://127.0.0.1:{port}/v1"
        mock = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "mock-provider", "--port", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert "listening" in mock.stdout.readline()
            todo = [(r["config"], Path(r["spec"])) for r in results if r["spec"]]
            with ThreadPoolExecutor(args.jobs) as pool:
                done = pool.map(lambda t: (t[0], run_one(t[1], url, Path(tempfile.mkdtemp(dir=work)))), todo)
                runs = dict(done)
        finally:
            mock.terminate()
            mock.wait(10)
    for r in results:
        r["run"] = runs.get(r["config"])

    n = len(results)
    strict = sum(r["strict"] for r in results)
    skip = sum(r["skip"] for r in results)
    by_reason = Counter(x for r in results for x in r["reasons"])
    refused_final = Counter(re.sub(r"^.*?: (no provider|no prompt|the imported spec does not validate|redteam: a "
                                   r"red-team config)", r"\1", r["final"]).split(";")[0][:70]
                            for r in results if not r["skip"])
    print(f"corpus: {args.corpus} ({n} configs)")
    print(f"imported strictly: {strict} / {n}")
    print(f"imported with --skip-unsupported: {skip} / {n}   (import time {import_s:.1f} s)")
    print("why the --skip-unsupported import stopped (configs):")
    for k, v in refused_final.most_common():
        print(f"  {v:4d}  {k}")
    print("refusal reasons in the strict import (configs with at least one):")
    for k, v in by_reason.most_common(40):
        print(f"  {v:4d}  {k}")
    adapters, checks = Counter(), Counter()
    for r in results:
        if r["spec"]:
            spec = yaml.safe_load(Path(r["spec"]).read_text())
            adapters.update(a.get("provider", "openai") for a in spec["adapters"])
            checks.update(c["kind"] for p in spec["prompts"] for c in p.get("checks") or [])
    print("adapters in the imported specs, by provider:", dict(adapters.most_common()))
    print("checks in the imported specs, by kind:", dict(checks.most_common()))
    if runs:
        ran = [x for x in runs.values()]
        items = sum(x["items"] for x in ran)
        errs = sum(x["errors"] or 0 for x in ran)
        failed = [c for c, x in runs.items() if x["errors"] is None or x["errors"]]
        print(f"runs against mock-provider: {len(ran)} specs, {items} items, {errs} item errors, "
              f"{sum(x['errors'] is None for x in ran)} runs without a report")
        for c in failed[:20]:
            x = runs[c]
            print(f"  ! {c}: exit {x['exit']} errors {x['errors']}: {x.get('first_error') or x.get('stderr')}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
