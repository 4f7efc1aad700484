"""Issue 23: gate, diff, rescore and export read a saved report in one streamed pass
(``runs/report_stream.py``, ``runs/report_pass.py``) instead of parsing it whole. A line edited in
place anywhere (the file still in the streamed layout) still fails the hash; a report recorded nowhere
still has its verdicts decided again; the outputs are those of reading the file whole; and the reader
holds one outcome at a time. Real reports written by the real CLI or by the report writer itself."""
from __future__ import annotations

import hashlib
import json
import shutil
import tracemalloc
from pathlib import Path

import pytest

from conftest import run_cli
from evalfarm.core.report.framing import report_chunks
from evalfarm.runs.report_pass import read_pass
from evalfarm.runs.report_stream import NotStreamed, ReportStream

SPEC = """name: streamed
adapters: [mock]
trials: 2
prompts:
""" + "".join(f'  - {{id: p{i:02d}, text: "say w{i}", expected_output_contains: ["{"w" + str(i) if i % 3 else "never"}"]}}\n'
              for i in range(12))


def one_error(res) -> str:
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("evalfarm: note:")]
    assert res.returncode == 2, (res.returncode, res.stdout[-800:], res.stderr[-1500:])
    assert len(lines) == 1 and lines[0].startswith("evalfarm: error: ") and "Traceback" not in res.stderr, lines
    return lines[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, Path]:
    """(state dir, saved report) of a real run: 12 prompts x 2 trials, every third prompt failing."""
    tmp = tmp_path_factory.mktemp("streamed")
    (tmp / "spec.yaml").write_text(SPEC)
    res = run_cli("run", str(tmp / "spec.yaml"), "--state-dir", str(tmp / "state"))
    assert res.returncode == 0, res.stderr
    [path] = [p for p in (tmp / "state" / "runs").glob("*.json") if not p.name.endswith(".lineage.json")]
    return tmp / "state", path


class Collect:
    def __init__(self) -> None:
        self.seen: list[tuple[dict, dict | None]] = []

    def add(self, o, new):
        self.seen.append((o, new))


def edit_line(path: Path, index: int, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` on the file's ``index``-th line (negative: from the end), the
    layout kept (the streamed reader, not the whole-file fallback, must catch it)."""
    lines = path.read_bytes().split(b"\n")
    assert old.encode() in lines[index], (index, lines[index][:200])
    lines[index] = lines[index].replace(old.encode(), new.encode(), 1)
    path.write_bytes(b"\n".join(lines))


def line_no(path: Path, marker: str, which: int = 0) -> int:
    hits = [i for i, line in enumerate(path.read_bytes().split(b"\n")) if marker.encode() in line]
    return hits[which]


@pytest.mark.parametrize("where", ["head", "first outcome", "middle outcome", "last outcome", "a prompt",
                                   "last prompt"])
def test_a_line_edited_in_place_anywhere_fails_gate_diff_rescore_and_export(saved, tmp_path, where):
    state0, path0 = saved
    state = tmp_path / "state"
    shutil.copytree(state0, state)
    path = state / "runs" / path0.name
    with ReportStream(path) as rs:  # the untouched file is read streamed
        assert sum(1 for _ in rs.outcomes()) == 24
        assert rs.finish() == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    first = line_no(path, '"outcomes": [') + 1
    at = {"head": (line_no(path, '"items_planned"'), '"items_planned": 24', '"items_planned": 25'),
          "first outcome": (first, "[mock] say w0", "[mock] say w9"),
          "middle outcome": (first + 12, '"passed": false', '"passed": true'),
          "last outcome": (first + 23, '"trial": 1', '"trial": 0'),
          "a prompt": (line_no(path, '"id":"p05"'), '"text":"say w5"', '"text":"say w6"'),
          "last prompt": (line_no(path, '"id":"p11"'), '"w11"]', '"never"]')}[where]
    edit_line(path, *at)
    with ReportStream(path) as rs:  # still in the streamed layout: the stream, not the fallback, reads it
        for _ in rs.outcomes():
            pass
        rs.finish()
    for args in (["gate", str(path)], ["diff", str(path), str(path)], ["rescore", str(path), "--no-save"],
                 ["export", "jsonl", str(path)], ["export", "csv", str(path), "-o", str(tmp_path / "x.csv")]):
        line = one_error(run_cli(*args, "--state-dir", str(state)))
        assert f"{path}: edited after it was saved" in line and "its lineage stub" in line, (args, line)
    assert not (tmp_path / "x.csv").exists()  # nothing written from an edited report

    # the stub rewritten to the edited bytes: the registry's seal, checked on the streamed digest
    stub = path.with_name(path.stem + ".lineage.json")
    data = json.loads(stub.read_text())
    data["content_hash"] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    stub.write_text(json.dumps(data))
    line = one_error(run_cli("gate", str(path), "--state-dir", str(state)))
    assert "was edited after it was saved" in line and "the registry sealed" in line, line


def test_an_unrecorded_report_with_one_verdict_flipped_in_place_is_refused_by_its_outputs(saved, tmp_path):
    _, path0 = saved
    path = tmp_path / "loose.json"
    path.write_bytes(path0.read_bytes())
    empty = tmp_path / "empty"
    p = read_pass(path, empty, "gate", Collect, recheck=True)
    assert p.streamed and len(p.sink.seen) == 24 and all(new is not None for _, new in p.sink.seen)
    assert p.trusted.rechecked is not None and p.trusted.rechecked.consistent
    assert "outcomes" not in p.trusted.report  # the head only: the outcomes went to the sink
    # outcome 18 is p09 trial 0, which fails ("never"): flipped to a pass, figures left as they were
    n = line_no(path, '"outcomes": [') + 1 + 18
    edit_line(path, n, '"golden_passed": false', '"golden_passed": true')
    edit_line(path, n, '"passed": false, "failure_mode": "instruction_miss"', '"passed": true, "failure_mode": null')
    for args in (["gate", str(path)], ["diff", str(path), str(path0)]):
        line = one_error(run_cli(*args, "--state-dir", str(empty)))
        assert "its stored verdicts are not what its outputs earn" in line, line
        assert "outcomes[18] (mock/p09 trial 0) says golden_passed: true but its output fails" in line, line


def whole(src: Path, dst: Path) -> Path:
    """The same report reformatted (indent 2, one document): not in the streamed layout, so it is read
    whole, as every report was before streaming."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(json.loads(src.read_bytes()), indent=2))
    return dst


def test_streamed_reads_give_what_whole_reads_give(saved, tmp_path):
    _, path0 = saved
    streamed = tmp_path / "a" / "run.json"
    streamed.parent.mkdir()
    streamed.write_bytes(path0.read_bytes())
    read_whole = whole(path0, tmp_path / "b" / "run.json")
    empty = tmp_path / "empty"
    assert read_pass(streamed, empty, "gate", Collect, recheck=True).streamed
    assert not read_pass(read_whole, empty, "gate", Collect, recheck=True).streamed
    outs = {}
    for name, path in (("streamed", streamed), ("whole", read_whole)):
        d = path.parent
        gate = run_cli("gate", str(path), "--json", "--junit", str(d / "junit.xml"), "--pr-summary",
                       str(d / "pr.md"), "--baseline", str(path0), "--state-dir", str(empty))
        assert gate.returncode == 0, gate.stderr
        diff = run_cli("diff", str(path0), str(path), "--json", "--state-dir", str(empty))
        assert diff.returncode == 0, diff.stderr
        for fmt in ("jsonl", "csv"):
            res = run_cli("export", fmt, str(path), "-o", str(d / f"out.{fmt}"), "--state-dir", str(empty))
            assert res.returncode == 0, res.stderr
        outs[name] = {"gate": json.loads(gate.stdout), "diff": json.loads(diff.stdout),
                      **{f: (d / f).read_bytes() for f in ("junit.xml", "pr.md", "out.jsonl", "out.csv")}}
    s, w = outs["streamed"], outs["whole"]
    for key in ("junit.xml", "out.jsonl", "out.csv"):
        assert s[key] == w[key], key
    assert s["pr.md"].replace(b"/a/", b"/b/") == w["pr.md"]
    assert s["gate"] == w["gate"] and s["gate"]["cases"]["counts"]["regressed"] == 0
    assert s["gate"]["cases"]["counts"]["still_broken"] == 4 and s["gate"]["cases"]["counts"]["stable"] == 8
    s["diff"]["notes"] = [n.replace("/a/", "/b/") for n in s["diff"]["notes"]]  # the note names the file
    assert s["diff"] == w["diff"] and len(s["diff"]["cases"]["stable"]) == 8
    assert s["out.jsonl"].count(b"\n") == 24


def report_file(path: Path, n_prompts: int, trials: int, body: int, shuffle: bool = False) -> Path:
    """A report written by the report writer itself (``framing.report_chunks``): ``n_prompts`` x
    ``trials`` outcomes of ``body`` characters of output each."""
    head = {"schema": "evalfarm.report/1", "run_id": "20260101T000000000000Z-abcdef", "spec_name": "big"}
    prompts = [json.dumps({"id": f"p{i:06d}", "text": f"t{i}"}) for i in range(n_prompts)]
    order = [(i, t) for i in range(n_prompts) for t in range(trials)]
    if shuffle:
        order = order[1::2] + order[0::2]
    lines = (json.dumps({"prompt_id": f"p{i:06d}", "adapter": "mock", "trial": t, "output": "x" * body})
             for i, t in order)
    with open(path, "wb") as fh:
        for chunk in report_chunks(head, lines, prompts):
            fh.write(chunk)
    return path


def read_peak(path: Path) -> int:
    """Peak traced memory of one streamed pass with every prompt looked up (as gate does)."""
    tracemalloc.start()
    try:
        with ReportStream(path, lookup=True) as rs:
            n = 0
            for o in rs.outcomes():
                assert rs.prompt(o["prompt_id"])["id"] == o["prompt_id"]
                n += 1
            digest = rs.finish()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == rs.outcomes_read == 2 * rs.prompts_read
    assert digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return peak


def test_the_reader_holds_one_outcome_at_a_time(tmp_path):
    small = report_file(tmp_path / "small.json", 1000, 2, 2000)  # 2,000 outcomes, 4 MB
    big = report_file(tmp_path / "big.json", 8000, 2, 2000)  # 16,000 outcomes, 33 MB
    p_small, p_big = read_peak(small), read_peak(big)
    # bounded by the read buffers (1 MB chunks, two cursors), not by the file: 8 x the outcomes, same peak
    assert p_big < 1.25 * p_small + 256 * 1024 and p_big < big.stat().st_size / 5, (p_small, p_big)


def test_outcomes_out_of_plan_order_are_still_matched_to_their_prompts(tmp_path):
    path = report_file(tmp_path / "shuffled.json", 50, 2, 10, shuffle=True)
    with ReportStream(path, lookup=True) as rs:
        found = [rs.prompt(o["prompt_id"])["id"] == o["prompt_id"] for o in rs.outcomes()]
        rs.finish()
    assert len(found) == 100 and all(found)


@pytest.mark.parametrize("damage", [b"\n  ]\n}\n{}\n", b"\n  ]\n}\n\n\n"])
def test_a_file_not_in_the_streamed_layout_is_not_streamed(tmp_path, damage):
    path = report_file(tmp_path / "r.json", 5, 1, 10)
    data = path.read_bytes()
    path.write_bytes(data[: -len(b"\n  ]\n}\n")] + damage)
    with pytest.raises(NotStreamed):
        with ReportStream(path) as rs:
            rs.finish()
