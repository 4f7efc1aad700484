"""What the dashboard tests share: a real `evalfarm serve` subprocess, Debian's chromium driven
by Playwright, a state dir made by real `evalfarm run` / `evalfarm ab` commands, and the
directory where page screenshots are kept as test artifacts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import EVALFARM, EXAMPLES, env_for, free_port, run_cli
from conftest import wait_for as wait_until  # noqa: F401  (polls from Python: the pages' CSP forbids eval)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("EVALFARM_TEST_ARTIFACTS") or Path(tempfile.gettempdir()) / "evalfarm-test-artifacts")
SHOTS = ARTIFACTS / "dashboard"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def metric_values(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus exposition parsed by prometheus_client's own parser: {(sample, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture(scope="module")
def browser(request):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_chromium(p)
        version = b.version
        yield b
        b.close()
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\ndashboard screenshots (chromium {version}): {SHOTS}")


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.dialogs = []  # any alert/confirm/prompt would mean injected script ran
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    ctx.close()


def launch_chromium(playwright):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run 'make chromium' (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5000, f"{path}: screenshot looks empty"
    return path


class Serve:
    """`evalfarm serve` in a subprocess on a free port; ``url`` once it says it listens."""

    def __init__(self, state_dir: Path, *args: str, host: str = "127.0.0.1", **env: str) -> None:
        self.port = free_port()
        self.host = host
        self.log = Path(tempfile.mkstemp(prefix="serve-", suffix=".log")[1])
        self.proc = subprocess.Popen([*EVALFARM, "serve", "--state-dir", str(state_dir), "--host", host,
                                      "--port", str(self.port), *args], env=env_for(**env),
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if b"evalfarm serve: http://" in self.log.read_bytes():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: {self.log.read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"serve did not start: {self.log.read_text()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def banner(self) -> str:
        return self.log.read_text().splitlines()[0]

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
        req = urllib.request.Request(self.url + path, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def json(self, path: str):
        status, _, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)


CASES = [
    {"id": "greet", "input": "please say ok-greet", "checks": [{"kind": "contains", "value": "ok-greet"}],
     "criteria": [{"id": "grounded", "weight": 1, "description": "says only what was asked"},
                  {"id": "concise", "weight": 2, "description": "one short line"}]},
    {"id": "judged", "input": "please say ok-judged [[fail-criterion:concise]]",
     "checks": [{"kind": "contains", "value": "ok-judged"}],
     "criteria": [{"id": "grounded", "weight": 1, "description": "says only what was asked"},
                  {"id": "concise", "weight": 2, "description": "one short line"}]},
    {"id": "refuse", "input": "please say ok-refuse [[refuse]]", "checks": [{"kind": "contains", "value": "ok-refuse"}]},
    {"id": "cut", "input": "please say ok-cut [[length]]", "checks": [{"kind": "contains", "value": "ok-cut"}]},
    {"id": "jsonish", "input": "please say ok-jsonish", "checks": [{"kind": "json"}]},
    {"id": "xss", "input": f"{XSS} ok-xss", "checks": [{"kind": "contains", "value": "ok-xss"}]},
]


def make_state(root: Path, provider_url: str) -> dict:
    """A state dir made only by real commands: a case-file run promoted to baseline 'cases' (v1),
    the same cases under prompt v2 (which regresses them: gated, its gate fails), a spec whose name and outputs carry an
    XSS payload, and a synthetic A/B comparison with its ledger and audit chain."""
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    (root / "cases.yaml").write_text(yaml.safe_dump(CASES))
    store = root / "prompts" / "echo"
    store.mkdir(parents=True)
    (store / "v1.yaml").write_text("system: Repeat the request.\nuser: '{input}'\n")
    (store / "v2.yaml").write_text("system: Repeat the request.\nuser: '[[reply:sorry, no]] {input}'\n")
    (store / "current").write_text("v1\n")
    state = root / "state"
    common = ("--dataset", "cases.yaml", "--model", "m1", "--base-url", provider_url, "--state-dir", str(state))
    first = run_cli("run", *common, "--promote", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr  # case files: no threshold set
    second = run_cli("run", *common, "--prompt-version", "v2", "--gate", cwd=root)  # regresses: the gate fails
    assert second.returncode == 1, second.stdout + second.stderr
    (root / "xss.yaml").write_text(yaml.safe_dump({
        "name": f"spec {XSS}", "lineage_tag": "xss-tag", "adapters": ["mock"],
        "prompts": [{"id": "p1", "text": f"echo {XSS}"}, {"id": "p2", "text": "plain"}],
        "thresholds": {"golden_pass_rate_min": 0.5}}))
    third = run_cli("run", str(root / "xss.yaml"), "--state-dir", str(state), cwd=root)
    assert third.returncode == 0, third.stdout + third.stderr
    ab = run_cli("ab", "--suite", str(EXAMPLES / "ab" / "suite.yaml"), "--arm-a", "baseline", "--arm-b", "terse",
                 "--arms", "3", "--trials", "2", cwd=root, EVALFARM_STATE_DIR=str(state))
    assert ab.returncode == 0, ab.stdout + ab.stderr
    runs = sorted(p for p in (state / "runs").glob("*.json") if not p.name.endswith(".lineage.json"))
    reports = [json.loads(p.read_text()) for p in runs]
    return {"state": state, "v1": reports[0], "v2": reports[1], "xss": reports[2],
            "ab": next((state / "reports" / "eval_ab").glob("*.json")).stem}


def copy_state(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
