"""An archived farm run (EVALFARM_ARCHIVE, issue 23): the plan and finished outcomes live on the archive,
Redis only what is in flight. All real: redis-server, celery workers, mock-provider over HTTP."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from conftest import free_port, run_cli, wait_for
from evalfarm.core.report.model import stable_view

N = 3000


def make_spec(tmp: Path, url: str, n: int = N) -> Path:
    lines = "\n".join(json.dumps({"id": f"p{i:05d}", "text": f"prompt {i}",
                                  "expected_output_contains": [str(i) if i % 7 else "never"]}) for i in range(n))
    (tmp / "d.jsonl").write_text(lines + "\n")
    (tmp / "s.yaml").write_text(f"name: archived\ndataset: d.jsonl\n"
                                f"adapters:\n  - {{id: m, model: m1, base_url: '{url}'}}\n")
    return tmp / "s.yaml"


def counts(url: str, run_id: str) -> dict[str, int]:
    r = redis.Redis.from_url(url)
    return {k.decode(): int(v) for k, v in r.hgetall(f"ef:run:{run_id}:counts").items()}


class MotoS3:
    """moto's standalone S3 server (``moto_server``), a real HTTP server speaking the S3 API."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.log = open(tmp / "moto.log", "wb")
        self.proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1",
                                      "-p", str(self.port)], stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.env = {"EVALFARM_S3_ENDPOINT_URL": f"http://127.0.0.1:{self.port}", "AWS_ACCESS_KEY_ID": "test",
                    "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        os.environ.update(self.env)  # this process reads the archive too (counting what is archived)
        import boto3

        self.client = boto3.client("s3", endpoint_url=self.env["EVALFARM_S3_ENDPOINT_URL"])
        wait_for(self._up, timeout=30, what="moto_server")
        self.client.create_bucket(Bucket="evals")

    def _up(self) -> bool:
        try:
            self.client.list_buckets()
            return True
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    def stop(self) -> None:
        os.killpg(self.proc.pid, 15)
        self.proc.wait(10)
        for k in self.env:
            os.environ.pop(k, None)


@pytest.fixture(params=["dir", "s3"])
def archive(request, tmp_path):
    """(EVALFARM_ARCHIVE and the environment it needs, a reader of the archive): a shared directory, or a
    bucket on moto's S3 server."""
    from evalfarm.executors.archive import archive_for

    if request.param == "dir":
        url = str(tmp_path / "archive")
        yield {"EVALFARM_ARCHIVE": url}, archive_for(url)
        return
    s3 = MotoS3(tmp_path)
    try:
        url = f"s3://evals/runs-{time.monotonic_ns()}"
        yield {"EVALFARM_ARCHIVE": url, **s3.env}, archive_for(url)
    finally:
        s3.stop()


def archived_lines(archive, run_id: str) -> int:
    return sum((archive.get(n) or b"").count(b"\n") for n in archive.names(f"{run_id}/out/"))


def settled(fn, what: str, timeout: float = 60.0):
    """The value ``fn`` returns once two reads 0.5 s apart agree (the workers' in-flight batches landed)."""
    last = [object()]

    def same():
        now = fn()
        ok, last[0] = now == last[0], now
        return ok

    wait_for(same, timeout=timeout, what=what, every=0.5)
    return last[0]


def test_flushall_mid_run_then_resume_reruns_only_what_was_not_archived(tmp_path, redis_server, start_worker,
                                                                       provider, archive):
    p = provider("--latency-ms", "20")
    spec = make_spec(tmp_path, p.url)
    env, archive = {**archive[0], "EVALFARM_MAX_IN_FLIGHT": "16"}, archive[1]
    start_worker(redis_server.url, concurrency=2, **env)
    start_worker(redis_server.url, concurrency=2, **env)
    res = run_cli("run", str(spec), "--detach", "--batch-size", "50", broker=redis_server.url, **env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    r = redis.Redis.from_url(redis_server.url)
    # nothing of the plan in Redis: no items hash, no order list, no per-item result
    for part in ("items", "order", "results", "report:outcomes"):
        assert not r.exists(f"ef:run:{run_id}:{part}")
    wait_for(lambda: counts(redis_server.url, run_id).get("done", 0) >= 0.6 * N, timeout=120, what="60% done")
    r.flushall()
    # the batches in the workers' hands finish and land on the archive; then nothing moves
    archived = settled(lambda: archived_lines(archive, run_id), "the archive to stop growing")
    asked_before = settled(lambda: p.stats()["requests"], "the provider to stop being asked")
    assert 0.6 * N <= archived < N
    gone = run_cli("wait", run_id, "--no-save", "--timeout", "30", broker=redis_server.url, **env)
    assert gone.returncode == 4 and f"'evalfarm resume {run_id}' runs only what was not archived" in gone.stderr
    res = run_cli("resume", run_id, "--json", "--no-save", "--timeout", "120", broker=redis_server.url, **env)
    assert res.returncode == 0, res.stderr
    assert "restored from the archive" in res.stderr
    report = json.loads(res.stdout)
    # only what was not archived ran again: every request after the resume is an item the archive lacked
    assert p.stats()["requests"] == asked_before + (N - archived)
    assert asked_before == archived  # nothing that was asked got lost (the in-flight batches were archived)
    keys = [o["key"] for o in report["outcomes"]]
    assert len(keys) == N and len(set(keys)) == N
    # the same report as a clean run's (an archived run on a fresh Redis, then an in-process run)
    clean = run_cli("run", str(spec), "--no-save", "--json", EVALFARM_ARCHIVE="")
    assert clean.returncode == 0, clean.stderr
    ref = stable_view(json.loads(clean.stdout))
    view = stable_view(report)
    assert view["per_adapter"] == ref["per_adapter"] and view["outcomes"] == ref["outcomes"]


def test_archived_run_keeps_redis_flat_and_streams_the_report(tmp_path, redis_server, start_worker, provider):
    p = provider()
    spec = make_spec(tmp_path, p.url, n=2000)
    archive = tmp_path / "archive"
    env = {"EVALFARM_ARCHIVE": str(archive)}
    start_worker(redis_server.url, concurrency=2, **env)
    res = run_cli("run", str(spec), "--json", "--batch-size", "100", "--state-dir", str(tmp_path / "st"),
                  broker=redis_server.url, **env)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert [o["prompt_id"] for o in report["outcomes"]] == [f"p{i:05d}" for i in range(2000)]  # plan order
    assert len(report["prompts"]) == 2000
    run_id = report["run_id"]
    assert sorted(x.name for x in (archive / run_id).iterdir()) == ["meta.json", "out", "plan", "prompts", "report"]
    assert len(list((archive / run_id / "out").glob("*.jsonl"))) == 20
    r = redis.Redis.from_url(redis_server.url)
    held = sum(r.memory_usage(k) or 0 for k in r.scan_iter(f"ef:run:{run_id}:*"))
    assert held < 20_000, held  # the meta, counters, a bitmap, the head and summary: not per item
    saved_path = tmp_path / "st" / "runs" / f"{run_id}.json"
    saved = json.loads(saved_path.read_text())
    assert stable_view(saved) == stable_view(report)
    assert p.stats()["requests"] == 2000
    # the case index the aggregate wrote is the one the dashboard would build by reading the file
    from evalfarm.dashboard import reports
    from evalfarm.dashboard.runs import Runs

    key = reports.stat_key(saved_path)
    loaded, built = reports.load_index(saved_path, key), reports.build_index(saved_path, key[0])
    assert loaded is not None and loaded.digest == built.digest and loaded.figures() == built.figures()
    for col in ("offsets", "lengths", "trial", "status"):
        assert list(getattr(loaded, col)) == list(getattr(built, col)), col
    for col in ("adapter", "case", "mode"):
        assert [loaded.names[i] for i in getattr(loaded, col)] == [built.names[i] for i in getattr(built, col)]
    loaded.prompts.get("")
    assert dict(loaded.prompts) == built.prompts and len(built.prompts) == 2000

    class Registry:
        def read(self):
            return {"by_run": {}, "prompts": {}, "gates": {}}

    runs = Runs(saved_path.parent, Registry())
    assert runs.index(run_id).figures() == built.figures()  # served from the saved index
    failed = runs.cases(run_id, "failed", page=3, per_page=20)
    assert failed["total"] == 286 and [c["prompt_id"] for c in failed["cases"]] == [
        f"p{i:05d}" for i in range(0, 2000, 7)][40:60]
    assert runs.cases(run_id, page=100, per_page=20)["cases"][-1]["prompt_id"] == "p01999"
    by_adapter = runs.cases(run_id, adapter="m", page=2, per_page=20)
    assert by_adapter["total"] == 2000 and by_adapter["cases"][0]["prompt_id"] == "p00020"
    assert runs.cases(run_id, adapter="nobody")["total"] == 0
    assert runs.case(run_id, 1999)["input"] is not None
    (saved_path.parent / f"{run_id}.index").write_bytes(b"evalfarm-report-index 1\n{not json")
    assert reports.load_index(saved_path, key) is None  # a broken index: the file is read instead


def test_s3_archive_writes_whole_objects_and_lists_them(tmp_path):
    """The S3 archive on moto's server: a 40 MB object goes up in parts (multipart) and comes back whole;
    a missing object is None, not an error."""
    from evalfarm.executors.archive import S3Archive

    s3 = MotoS3(tmp_path)
    try:
        a = S3Archive("s3://evals/p", endpoint_url=s3.env["EVALFARM_S3_ENDPOINT_URL"])
        big = [bytes([i]) * (1 << 20) for i in range(40)]
        assert a.put("r/report/outcomes.part", iter(big)) == 40 << 20
        assert a.size("r/report/outcomes.part") == 40 << 20
        assert b"".join(a.stream("r/report/outcomes.part")) == b"".join(big)
        a.put("r/out/0000001.jsonl", [b"{}\n"])
        assert a.names("r/out/") == ["r/out/0000001.jsonl"] and a.names("r/none/") == []
        assert a.get("r/missing") is None and a.size("r/missing") is None
    finally:
        s3.stop()


def test_report_index_spills_to_disk_and_reads_back_the_same(monkeypatch):
    """The aggregate's index writer keeps its columns on disk past SPILL entries (flat memory at a million
    items): spilled every 7 entries, it writes the very bytes it writes in memory, and they read back."""
    from evalfarm.core.report.index import IndexWriter, read_index

    def write(spill: int) -> bytes:
        monkeypatch.setattr(IndexWriter, "SPILL", spill)
        w = IndexWriter()
        for i in range(100):
            w.add(i * 10, 9, {"adapter": f"a{i % 2}", "prompt_id": f"case\n{i // 4}", "trial": i % 2,
                              "passed": i % 3 != 0, "failure_mode": None if i % 3 else "wrong_answer",
                              "latency_ms": float(i)})
        w.last_line_has_no_comma()
        for i in range(25):
            w.add_prompt(f"case\n{i}", 5000 + i * 10, 9)
        w.last_line_has_no_comma("prompts")
        return b"".join(w.chunks(100, 200, {"size": 1}))

    data = write(7)
    assert data == write(1 << 16)
    got = read_index(data)
    names, cols = got["names"], got["cols"]
    assert list(cols["offsets"]) == [100 + i * 10 for i in range(100)]
    assert list(cols["lengths"]) == [9] * 99 + [8] and list(cols["prompt_lengths"]) == [9] * 24 + [8]
    assert [names[c] for c in cols["case"]] == [f"case\\n{i // 4}" for i in range(100)]
    assert [names[a] for a in cols["adapter"]] == [f"a{i % 2}" for i in range(100)]
    assert got["header"]["figures"]["statuses"] == {"failed": 34, "passed": 66}
    assert got["header"]["figures"]["latency"]["n"] == 100
    assert [names[p] for p in cols["prompt_id"]][:2] == ["case\\n0", "case\\n1"]


def test_a_big_streamed_dataset_still_names_a_duplicate_id_and_where_it_was_first(tmp_path):
    """A JSONL dataset over the held size keeps a hash per id while it is validated (a million prompts:
    64 MB, not 143): a duplicate is still one line naming both places."""
    rows = [json.dumps({"id": f"case-{i:06d}", "text": "x" * 60}) for i in range(70_000)]
    rows[50_000] = json.dumps({"id": "case-000010", "text": "again"})
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n")
    assert (tmp_path / "d.jsonl").stat().st_size > 4 << 20
    (tmp_path / "s.yaml").write_text("name: big\ndataset: d.jsonl\nadapters: [mock]\n")
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save")
    assert res.returncode == 2
    assert "d.jsonl:50001: id: duplicate prompt id 'case-000010' (first defined at" in res.stderr
    assert "d.jsonl:11)" in res.stderr
    rows[50_000] = json.dumps({"id": "case-050000", "text": "x"})
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n")
    from evalfarm import open_spec

    assert open_spec(tmp_path / "s.yaml").source.count == 70_000


def test_archived_run_with_a_judge_equals_the_in_process_run(tmp_path, redis_server, start_worker, provider):
    """An archived batch runs both stages in one task (call, then judge): the report is the in-process
    run's, judge scores and spend included."""
    p = provider()
    lines = ["name: judged", "adapters:", f"  - {{id: m, model: m1, base_url: '{p.url}'}}",
             f"judge: {{model: j1, base_url: '{p.url}', price: {{input: 1000, output: 1000}}}}", "prompts:"]
    lines += [f"  - {{id: q{i}, text: 'question {i}', criteria: [{{id: ok, description: fine}}]}}" for i in range(60)]
    (tmp_path / "s.yaml").write_text("\n".join(lines) + "\n")
    env = {"EVALFARM_ARCHIVE": str(tmp_path / "archive")}
    start_worker(redis_server.url, concurrency=2, **env)
    farm = run_cli("run", str(tmp_path / "s.yaml"), "--json", "--no-save", "--batch-size", "25",
                   broker=redis_server.url, **env)
    assert farm.returncode in (0, 1), farm.stderr
    report = json.loads(farm.stdout)
    assert all(o["judge_score"] is not None for o in report["outcomes"])
    assert (tmp_path / "archive" / report["run_id"] / "out").is_dir()
    local = run_cli("run", str(tmp_path / "s.yaml"), "--json", "--no-save")
    ref = stable_view(json.loads(local.stdout))
    view = stable_view(report)
    assert view["per_adapter"] == ref["per_adapter"] and view["outcomes"] == ref["outcomes"]


def test_registry_records_case_verdicts_streamed_and_falls_back_when_trials_are_apart(tmp_path):
    """A saved report's case verdicts are recorded a case at a time (plan order keeps a case's trials
    together); a report whose trials are apart (written by another tool) gets the same verdicts, read
    whole, and no case is recorded twice."""
    import sqlite3

    from evalfarm.core.report.framing import report_bytes
    from evalfarm.runs.registry import Registry

    def outcome(case: str, trial: int, passed: bool) -> dict:
        return {"adapter": "m", "prompt_id": case, "trial": trial, "passed": passed, "golden_passed": passed,
                "error": None, "key": f"{case}-{trial}"}

    together = [outcome("a", 0, True), outcome("a", 1, False), outcome("b", 0, True), outcome("b", 1, True)]
    apart = [together[0], together[2], together[1], together[3]]
    for name, outcomes in (("together", together), ("apart", apart)):
        head = {"run_id": f"20261202T000000000000Z-{name[:6].ljust(6, '0')}", "spec_name": "s", "per_adapter": {},
                "adapters": ["m"]}
        path = tmp_path / f"{name}.json"
        path.write_bytes(report_bytes({**head, "outcomes": outcomes}))
        Registry(tmp_path).record(head, path)
        rows = sqlite3.connect(tmp_path / "registry.db").execute(
            "SELECT case_id, verdict, trials FROM case_verdicts WHERE run_id = ? ORDER BY case_id",
            (head["run_id"],)).fetchall()
        assert rows == [("a", "fail", 2), ("b", "pass", 2)], name
