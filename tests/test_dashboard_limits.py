"""Issue 17 items 5 and 6 against a real `evalfarm serve`: a report with one huge output is shown cut,
downloaded whole as a stream, and never held (the server's peak RSS, VmHWM from /proc, grows by far
less than the report); a 200,000-deep JSON array in an outcome is named on the page, not a RecursionError
traceback in the log; the login redirect answers only with a path on this server."""
from __future__ import annotations

import hashlib
import http.client
from pathlib import Path

from dashboard_support import Serve

HUGE_MB = 100
GROWTH_LIMIT_MB = 40  # well under the output: the server may keep buffers and thread arenas, not the output


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM: the most the process ever held) in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out["VmRSS"], out["VmHWM"]


def huge_run(state: Path) -> tuple[str, str]:
    """A real run (the engine on the mock adapter) whose first output is ~40 MB of text with quotes,
    tabs, newlines, accents and emoji (escapes and multi-byte characters across every chunk boundary),
    saved by the Python API in evalfarm's layout."""
    from evalfarm import Runner, save_report
    from evalfarm.spec.models import EvalSpec

    spec = EvalSpec.model_validate({"name": "huge", "adapters": ["mock"], "prompts": [
        {"id": "huge", "text": "say a lot", "expected_output_contains": ["lot"]}, {"id": "small", "text": "hi"}]})
    report = Runner().run(spec).to_dict()
    line = 'a lot of "text"\tand \\ é 😀 \u2028 end\n'
    text = line * (HUGE_MB * 1_000_000 // len(line.encode()))
    report["outcomes"][0]["output"] = text
    path, _ = save_report(report, state)
    return path.stem, hashlib.sha256(text.encode()).hexdigest()


def test_a_huge_output_is_cut_on_the_page_streamed_whole_and_never_held(tmp_path):
    state = tmp_path / "state"
    rid, digest = huge_run(state)
    size = (state / "runs" / f"{rid}.json").stat().st_size
    assert size > HUGE_MB * 1_000_000
    s = Serve(state)
    try:
        s.json("/api/runs")  # the server's own start-up work done
        before, _ = rss_mb(s.proc.pid)
        assert s.get(f"/runs/{rid}")[0] == 200
        case = s.json(f"/api/runs/{rid}/cases/0")
        assert case["output_truncated"] is True and len(case["output"]) == 64 * 1024
        assert case["output"].startswith('a lot of "text"\tand \\ é 😀')
        assert case["output_bytes"] > HUGE_MB * 1_000_000 and case["output_url"] == f"/runs/{rid}/cases/0/output"
        status, _, page = s.get(f"/runs/{rid}/cases/0")
        assert status == 200 and b"the first 65536 characters shown" in page and b'id="output-download"' in page
        status, headers, body = s.get(f"/runs/{rid}/cases/0/output")
        assert status == 200 and headers["Content-Disposition"].startswith("attachment;")
        assert hashlib.sha256(body).hexdigest() == digest  # the whole output, byte for byte
        del body
        listing = s.json(f"/api/runs/{rid}/cases?filter=all")
        assert [c["prompt_id"] for c in listing["cases"]] == ["huge", "small"]
        assert len(listing["cases"][0]["output_preview"]) == 160
        after, peak = rss_mb(s.proc.pid)
        print(f"\nserve RSS {before:.1f} MB -> {after:.1f} MB (peak {peak:.1f} MB) after the run page, the case "
              f"page, its JSON and the download of a {size / 1e6:.0f} MB report's {HUGE_MB} MB output")
        assert peak - before < GROWTH_LIMIT_MB, (before, after, peak)  # not even for a moment
        assert "Traceback" not in s.log.read_text()
    finally:
        s.stop()


def test_a_200k_deep_array_is_named_not_a_traceback(tmp_path):
    from evalfarm import Runner, load_spec, save_report

    from conftest import EXAMPLES

    state = tmp_path / "state"
    path, _ = save_report(Runner().run(load_spec(EXAMPLES / "smoke.yaml")), state)
    lines = path.read_bytes().split(b"\n")
    first = next(n for n, x in enumerate(lines) if x.strip().startswith(b'{"key"'))
    deep = b"[" * 200_000 + b"]" * 200_000
    lines[first] = lines[first].replace(b'"checks": []', b'"checks": ' + deep, 1)
    path.write_bytes(b"\n".join(lines))
    rid = path.stem
    s = Serve(state)
    try:
        for url in ("/runs", f"/runs/{rid}", f"/runs/{rid}/cases/0", f"/api/runs/{rid}/cases/0",
                    f"/diff?a={rid}&b={rid}", "/metrics"):
            assert s.get(url)[0] == 200, url
        case = s.json(f"/api/runs/{rid}/cases/0")
        assert case["dropped"] == {"checks": "nested deeper than 64 levels"} and case["prompt_id"] == "hello"
        assert b"checks not shown: nested deeper than 64 levels" in s.get(f"/runs/{rid}/cases/0")[2]
        problems = s.json(f"/api/runs/{rid}")["problems"]
        assert any(p.startswith("edited after it was saved") for p in problems), problems  # and it says so
        log = s.log.read_text()
        assert "Traceback" not in log and "RecursionError" not in log, log[-2000:]
    finally:
        s.stop()


def test_the_login_redirect_stays_on_this_server(tmp_path):
    token = "t0ken-" + "y" * 20
    s = Serve(tmp_path, EVALFARM_SERVE_TOKEN=token)
    try:
        for path, want in ((f"//evil.example.com/?token={token}", "/evil.example.com/"),
                           (f"/\\evil.example.com/?token={token}", "/%5Cevil.example.com/"),
                           (f"/runs?token={token}&page=2", "/runs?page=2"),
                           (f"///evil.example.com/runs?token={token}", "/evil.example.com/runs")):
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
            conn.request("GET", path)
            resp = conn.getresponse()
            location = resp.getheader("Location")
            conn.close()
            assert resp.status == 303 and location == want, (path, resp.status, location)
            assert location.startswith("/") and not location.startswith(("//", "/\\")), location
    finally:
        s.stop()
