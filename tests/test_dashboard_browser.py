"""`evalfarm serve` in a real browser: Debian's chromium driven by Playwright, against a real
serve subprocess over a state dir made by real `evalfarm run` and `evalfarm ab` commands.
Screenshots of every page land in the directory printed at the end of the session."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import run_cli
from dashboard_support import XSS, Serve, browser, make_state, page, shot, wait_until  # noqa: F401 (fixtures)
from providers_fixture import MockProviderProc



@pytest.fixture(scope="module")
def built(tmp_path_factory):
    provider = MockProviderProc()
    try:
        yield make_state(tmp_path_factory.mktemp("dash"), provider.url)
    finally:
        provider.stop()


@pytest.fixture(scope="module")
def server(built):
    s = Serve(built["state"])
    yield s
    s.stop()


def test_runs_page_lists_the_runs_and_a_click_opens_one(page, built, server):
    page.goto(server.url + "/runs")
    rows = page.locator("tr.run-row")
    ids = {built[k]["run_id"] for k in ("v1", "v2", "xss")}
    assert {rows.nth(i).get_attribute("data-run") for i in range(rows.count())} == ids
    first = built["v1"]["run_id"]
    row = page.locator(f'tr.run-row[data-run="{first}"]')
    assert "★ cases" in row.inner_text()  # the baseline marker: promoted with --promote
    assert row.locator(".verdict").inner_text() == "PASS"
    assert "33.3%" in row.inner_text()  # 2 of 6 items passed (checks and judge)
    shot(page, "runs")
    page.locator(f'a.run-link:text-is("{first}")').click()
    page.wait_for_url(re.compile(rf"/runs/{first}$"))
    assert first in page.locator("h1").inner_text()
    assert page.errors == []


def test_runs_page_items_column_and_a_failed_gate_beside_the_thresholds_verdict(page, built, server):
    """Issue 17 item 8: the items column shows each run's items (not ``<built-in method items of dict>``),
    and a run whose gate failed says so beside its thresholds' verdict, in the list and on its page."""
    page.goto(server.url + "/runs")
    for key in ("v1", "v2", "xss"):
        report = built[key]
        row = page.locator(f'tr.run-row[data-run="{report["run_id"]}"]')
        items = row.locator("td").nth(9)  # the items column
        assert items.inner_text() == str(len(report["outcomes"])) == str(sum(f["items"] for f in
                                                                            report["per_adapter"].values()))
        assert items.get_attribute("class") == "items"
    assert "built-in method" not in page.locator("table.runs").inner_text()
    v2 = built["v2"]["run_id"]
    assert "gate FAILED" in page.locator(f'tr.run-row[data-run="{v2}"]').inner_text()
    page.goto(f"{server.url}/runs/{v2}")
    assert page.locator("#run-verdict").inner_text() == "thresholds PASS"  # no threshold set: nothing failed
    assert page.locator("#gate-verdict").inner_text() == "gate FAILED"
    regressions = page.locator('#gate li[data-brake="regressions"]').inner_text()
    assert regressions.startswith("regressions FAIL") and "2 case(s) passed in the baseline and fail now" in regressions
    assert "against baseline cases" in page.locator("#gate h2").inner_text()
    shot(page, "run-gate-failed")
    page.goto(f"{server.url}/runs/{built['v1']['run_id']}")  # promoted with --promote: its gate passed
    assert page.locator("#gate-verdict").inner_text() == "gate PASSED"
    assert page.errors == []


def test_filters_narrow_the_runs_list(page, built, server):
    page.goto(server.url + "/runs")
    page.select_option("select[name=spec]", built["xss"]["spec_name"])
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"spec="))
    rows = page.locator("tr.run-row")
    assert rows.count() == 1 and rows.first.get_attribute("data-run") == built["xss"]["run_id"]


def test_run_page_charts_have_one_bar_per_figure(page, built, server):
    report = built["v1"]
    page.goto(f"{server.url}/runs/{report['run_id']}")
    modes = {}
    for o in report["outcomes"]:
        if o["failure_mode"]:
            modes[o["failure_mode"]] = modes.get(o["failure_mode"], 0) + 1
    assert len(modes) == 4  # refusal, truncation, format_error, instruction_miss
    bars = page.locator('svg[data-chart="failure-taxonomy"] rect.bar')
    assert bars.count() == len(modes)
    assert {bars.nth(i).get_attribute("data-label"): int(bars.nth(i).get_attribute("data-value"))
            for i in range(bars.count())} == modes
    hist = page.locator('svg[data-chart="latency"] rect.bar')
    assert hist.count() == 20
    assert sum(int(hist.nth(i).get_attribute("data-count")) for i in range(20)) == len(report["outcomes"])
    assert page.locator('svg[data-chart="cost"] rect.bar').count() == 2  # models and judge, apart
    assert page.locator("table.adapters svg.scorebar").count() == 4 * len(report["per_adapter"])
    shot(page, "run")
    # a spec with a threshold: one threshold line per adapter on its metric's bar
    page.goto(f"{server.url}/runs/{built['xss']['run_id']}")
    assert page.locator("table.adapters line.threshold").count() == 1
    assert page.errors == []


def test_case_list_filters_without_reload_and_a_case_shows_checks_and_criteria(page, built, server):
    report = built["v1"]
    rid = report["run_id"]
    page.goto(f"{server.url}/runs/{rid}")
    page.evaluate("window.__sameDocument = 42")
    page.select_option("#case-filter select[name=filter]", "instruction_miss")
    wait_until(lambda: page.locator("#case-rows tr.case-row").count() == 1 and "filter=instruction_miss" in page.url,
               what="the filtered case list")
    assert page.evaluate("window.__sameDocument") == 42  # filtered through the API, no reload
    assert "filter=instruction_miss" in page.url
    row = page.locator("#case-rows tr.case-row").first
    assert "judged" in row.inner_text()
    row.locator("a.case-link").click()
    page.wait_for_url(re.compile(r"/cases/\d+$"))
    index = int(page.url.rsplit("/", 1)[1])
    outcome = report["outcomes"][index]
    assert outcome["prompt_id"] == "judged"
    assert page.locator("#case-output").inner_text() == outcome["output"]
    assert page.locator("tr.check-row").count() == len(outcome["checks"])
    crit = page.locator("tr.criterion-row")
    assert crit.count() == len(outcome["judge_criteria"]) == 2
    by_id = {crit.nth(i).locator("td").nth(0).inner_text(): crit.nth(i).inner_text() for i in range(2)}
    assert "fail" in by_id["concise"] and "pass" in by_id["grounded"]
    assert "scripted by mock-provider" in by_id["concise"]  # the judge's reason
    sent = next(p for p in report["prompts"] if p["id"] == "judged")  # the prompts section: what was asked
    assert page.locator("#case-input").inner_text() == sent["text"]
    href = page.locator("#output-download").get_attribute("href")  # the whole output, as a download
    status, headers, body = server.get(href)
    assert status == 200 and "attachment" in headers["Content-Disposition"] and body.decode() == outcome["output"]
    shot(page, "case")
    assert page.errors == []


def test_diff_lists_regressed_first_and_opens_both_outputs(page, built, server):
    a, b = built["v1"], built["v2"]
    cli = run_cli("diff", "baseline:cases", b["run_id"], "--state-dir", str(built["state"]), "--json")
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)["cases"]
    assert expected["counts"]["regressed"] == 2
    page.goto(f"{server.url}/diff?a=baseline:cases&b={b['run_id']}")
    sections = page.locator("section.diff-class")
    assert sections.first.get_attribute("data-class") == "regressed"
    assert f"regressed {expected['counts']['regressed']}" in page.locator("#mcnemar").inner_text()
    assert f"p = {expected['mcnemar']['p_value']:.4g}" in page.locator("#mcnemar").inner_text()
    case = page.locator('details.diff-case[data-class="regressed"]').first
    assert not case.locator(".side-a pre.output").is_visible()
    case.locator("summary").click()
    name = case.locator("summary").inner_text().split(" / ", 1)[1]
    out_a = next(o["output"] for o in a["outcomes"] if o["prompt_id"] == name)
    assert case.locator(".side-a pre.output").is_visible() and case.locator(".side-b pre.output").is_visible()
    assert case.locator(".side-a pre.output").inner_text() == out_a
    assert case.locator(".side-b pre.output").inner_text() == "sorry, no"
    shot(page, "diff")
    assert page.errors == []


def test_xss_payloads_show_as_text_and_run_nothing(page, built, server):
    xss = built["xss"]
    idx = next(i for i, o in enumerate(xss["outcomes"]) if o["prompt_id"] == "p1")
    cases_idx = next(i for i, o in enumerate(built["v1"]["outcomes"]) if o["prompt_id"] == "xss")
    for path in ("/runs", f"/runs/{xss['run_id']}", f"/runs/{xss['run_id']}/cases/{idx}",
                 f"/runs/{built['v1']['run_id']}/cases/{cases_idx}", f"/diff?a=baseline:cases&b={built['v2']['run_id']}",
                 f"/diff?a={xss['run_id']}&b={xss['run_id']}"):
        page.goto(server.url + path)
        for d in page.locator("details.diff-case").all():
            d.locator("summary").click()
        assert page.evaluate("window.__xss") is None, path
        assert page.dialogs == [], path
        assert page.evaluate("document.querySelectorAll('main script, main img, main [onerror]').length") == 0, path
        assert XSS in page.locator("main").inner_text(), path  # shown, as text
    page.goto(f"{server.url}/runs/{xss['run_id']}/cases/{idx}")
    assert page.locator("#case-output").inner_text() == xss["outcomes"][idx]["output"]
    assert XSS in page.locator("span.spec").inner_text()  # the spec name, escaped
    shot(page, "xss-case")
    assert page.errors == []


def test_ab_page_draws_intervals_and_runs_ab_verify(page, built, server):
    sha = built["ab"]
    art = json.loads((built["state"] / "reports" / "eval_ab" / f"{sha}.json").read_text())
    page.goto(server.url + "/ab")
    shot(page, "ab-list")
    page.locator("a.ab-link").first.click()
    page.wait_for_url(re.compile(rf"/ab/{sha}$"))
    assert page.locator("#ab-verify").inner_text().count("VERIFIED") == 1
    assert "NOT VERIFIED" not in page.locator("#ab-verify").inner_text()
    assert page.locator("#ab-verify li.s-passed").count() == 4  # address, canonical, ledger rows, audit event
    assert art["verdict"]["result"].upper() in page.locator("#ab-verdict").inner_text()
    assert len(art["comparisons"]) == 2  # honest (control vs candidate) and conflated (baseline vs candidate)
    lines = page.locator('svg[data-chart="delta-pass_rate"] line.interval')
    assert lines.count() == 2
    drawn = sorted((float(lines.nth(i).get_attribute("data-lo")), float(lines.nth(i).get_attribute("data-hi")))
                   for i in range(2))
    assert drawn == sorted(tuple(c["deltas"]["pass_rate"]["ci95"]) for c in art["comparisons"])
    shot(page, "ab")
    assert page.errors == []


def test_ab_verify_on_view_fails_for_an_edited_artifact(page, built, tmp_path):
    state = tmp_path / "state"
    shutil.copytree(built["state"], state)
    path = state / "reports" / "eval_ab" / f"{built['ab']}.json"
    art = json.loads(path.read_text())
    art["verdict"]["reason"] = "edited by hand"
    path.write_text(json.dumps(art))
    s = Serve(state)
    try:
        page.goto(f"{s.url}/ab/{built['ab']}")
        text = page.locator("#ab-verify").inner_text()
        assert "NOT VERIFIED" in text
        assert page.locator("#ab-verify li.s-failed").count() >= 2  # content address and canonical bytes
        assert "edited by hand" in page.locator("#ab-verdict").inner_text()
    finally:
        s.stop()


def test_error_pages_for_bad_and_unknown_references(page, server):
    for path, status in (("/runs/..%2F..%2Fetc%2Fpasswd", 400), ("/runs/20990101T000000000000Z-ffffff", 404),
                         ("/ab/" + "0" * 64, 404), ("/ab/..%2Fx", 400), ("/nope", 404)):
        resp = page.goto(server.url + path)
        assert resp.status == status, path
        assert page.locator("h1").inner_text() == str(status)


def test_token_is_required_off_loopback(page, built):
    refused = run_cli("serve", "--state-dir", str(built["state"]), "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "--token" in refused.stderr and "not loopback" in refused.stderr
    token = "t0ken-" + "x" * 20
    s = Serve(built["state"], host="0.0.0.0", EVALFARM_SERVE_TOKEN=token)
    try:
        assert "bound to 0.0.0.0, reachable from the network; token required" in s.banner
        for path in ("/runs", "/api/runs", "/metrics", "/api/farm/stream", "/static/app.js"):
            assert s.get(path)[0] == 401, path
            assert s.get(path, {"Authorization": "Bearer wrong-" + "x" * 20})[0] == 401, path
        assert s.get("/api/runs", {"Authorization": f"Bearer {token}"})[0] == 200
        assert s.get("/metrics", {"Authorization": f"Bearer {token}"})[0] == 200
        assert s.get("/api/runs", {"Authorization": f"Bearer {token}"}, method="POST")[0] == 405
        resp = page.goto(s.url + "/runs")
        assert resp.status == 401
        page.goto(f"{s.url}/runs?token={token}")  # once: sets an HttpOnly cookie, drops the token from the URL
        assert page.url == s.url + "/runs"
        assert page.locator("tr.run-row").count() == 3
        assert page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read it
    finally:
        s.stop()
