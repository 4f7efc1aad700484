"""The saved runs as the pages read them: the list (each report's head only), a run's page (its
index: ``reports``), a page of its cases, one case, an output as a download, and the diff of two runs.

A file that cannot be read becomes a row saying why; names from URLs are checked before they touch a
path (``safe``). Summaries are cached by file identity (size, mtime, inode), indexes too (the last
``INDEXES`` reports viewed), so a page view of a 10,000-case run reads its file once.
"""
from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterator

from . import reports, safe, views
from .registry import RegistryView
from .reports import Index, ReportError, stat_key
from .safe import BadRef
from ..ci.diff import compare_cases, diff_reports
from ..core.taxonomy import MODES as FAILURE_MODES

PAGE_MAX = 500
INDEXES = 8  # reports whose index is kept (each: ~40 bytes an outcome)
DIFF_OUTPUT_CHARS = 4000  # of each output on the diff page
CLASSES = ("regressed", "fixed", "still_broken", "stable", "unmeasured")


class _LRU:
    def __init__(self, size: int) -> None:
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, key):
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        return None

    def put(self, key, value) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


class Runs:
    """Read-only view of ``<state>/runs`` (with the registry's baselines, prompts and gates)."""

    def __init__(self, folder: Path, registry: RegistryView) -> None:
        self.folder = folder
        self.registry = registry
        self._summaries: dict[str, tuple[tuple, dict[str, Any]]] = {}
        self._indexes = _LRU(INDEXES)
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def path(self, rid: str) -> Path:
        return self.folder / f"{safe.run_id(rid)}.json"

    def files(self) -> list[Path]:
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return []
        out = []
        for e in entries:
            n = e.name
            if n.endswith(".json") and not n.endswith(".lineage.json") and not n.startswith("."):
                if safe.is_run_id(n[:-5]):
                    out.append(Path(e.path))
        out.sort(key=lambda p: p.name, reverse=True)  # run ids sort by time
        return out

    # -- the list -------------------------------------------------------------------------------
    def summary(self, path: Path) -> dict[str, Any]:
        """One run's summary from its head (cached by stat); a bad file gives an error row."""
        rid = path.name[:-5]
        try:
            key = stat_key(path)
        except OSError as exc:
            return views.bad_row(rid, f"cannot stat: {exc.strerror or exc}")
        hit = self._summaries.get(rid)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            head = reports.read_head(path)
            if head is None:  # not in evalfarm's layout: its index parses it (up to a size)
                head = self.index(rid).head
            row = views.summary(head, rid)
        except (OSError, ReportError, ValueError) as exc:
            row = views.bad_row(rid, str(exc) if isinstance(exc, ReportError) else f"unreadable: {exc}")
        except BadRef as exc:
            row = views.bad_row(rid, str(exc))
        self._summaries[rid] = (key, row)
        return row

    def list(self, spec: str | None = None, tag: str | None = None, adapter: str | None = None,
             verdict: str | None = None, page: int = 1, per_page: int = 100) -> dict[str, Any]:
        """Runs newest first, filtered; each with verdict, pass rate, cost, duration, baselines, gate."""
        reg = self.registry.read()
        rows = [self.summary(p) for p in self.files()]
        specs = sorted({r["spec_name"] for r in rows if r["spec_name"]})
        tags = sorted({r["lineage_tag"] for r in rows if r["lineage_tag"]})
        adapters = sorted({a for r in rows for a in r["adapters"]})
        if spec:
            rows = [r for r in rows if r["spec_name"] == spec]
        if tag:
            rows = [r for r in rows if r["lineage_tag"] == tag]
        if adapter:
            rows = [r for r in rows if adapter in r["adapters"]]
        if verdict:
            rows = [r for r in rows if r["verdict"] == verdict]
        per_page = max(1, min(PAGE_MAX, per_page))
        total = len(rows)
        pages = max(1, -(-total // per_page))
        page = max(1, min(page, pages))
        shown = []
        for r in rows[(page - 1) * per_page: page * per_page]:
            shown.append({k: v for k, v in r.items() if k != "per_adapter"} |
                         {"baselines": reg["by_run"].get(r["run_id"], []),
                          "prompt": reg["prompts"].get(r["run_id"]), "gate": reg["gates"].get(r["run_id"]),
                          "overall": {a: f["overall"] for a, f in r["per_adapter"].items()}})
        return {"runs": shown, "total": total, "page": page, "pages": pages, "per_page": per_page,
                "filters": {"spec": specs, "tag": tags, "adapter": adapters,
                            "verdict": list(views.VERDICTS) + ["UNREADABLE"]},
                "baselines": reg["baselines"], "registry_error": reg["error"]}

    def rows(self) -> list[dict[str, Any]]:
        return [self.summary(p) for p in self.files()]

    # -- one run --------------------------------------------------------------------------------
    def index(self, rid: str) -> Index:
        """The run's index, built once per file identity (two requests for one big run build it once)."""
        path = self.path(rid)
        try:
            key = stat_key(path)
        except FileNotFoundError:
            raise BadRef(f"no run {rid} under {self.folder}", 404) from None
        except OSError as exc:
            raise ReportError(f"cannot read {path.name}: {exc.strerror or exc}") from None
        with self._lock:
            lock = self._locks.setdefault(rid, threading.Lock())
        with lock:
            hit = self._indexes.get((rid, key))
            if hit is not None:
                return hit
            try:
                index = reports.load_index(path, key) or reports.build_index(path, key[0])
            except OSError as exc:
                raise ReportError(f"cannot read {path.name}: {exc.strerror or exc}") from None
            problem = reports.lineage_problem(path, index.digest)
            if problem:
                index.problems.insert(0, problem)
            self._indexes.put((rid, key), index)
            return index

    def _current(self, rid: str) -> tuple[Path, Index]:
        return self.path(rid), self.index(rid)

    def run(self, rid: str) -> dict[str, Any]:
        """Summary plus chart figures, the registry's baselines, prompt and gate (no outcomes)."""
        index = self.index(rid)
        summary = views.summary(index.head, rid)
        summary["problems"] = summary["problems"] + index.problems
        figs = index.figures()
        modes = figs["modes"]
        order = [m for m in FAILURE_MODES if m in modes] + sorted(m for m in modes if m not in FAILURE_MODES)
        reg = self.registry.read()
        return {**summary, "baselines": reg["by_run"].get(rid, []), "prompt": reg["prompts"].get(rid),
                "gate": reg["gates"].get(rid), "failure_taxonomy": [{"mode": m, "count": modes[m]} for m in order],
                "latency_histogram": figs["latency"], "statuses": figs["statuses"],
                "case_filters": ["all", "failed", "passed", "errored"] + order}

    def cases(self, rid: str, filter: str = "all", adapter: str | None = None, page: int = 1,
              per_page: int = 50) -> dict[str, Any]:
        """One page of a run's cases, filtered by failure mode ("all", "failed", "passed", "errored" or
        a mode name) and adapter: the index picks them, and only they are read from the file."""
        path, index = self._current(rid)
        ids = index._ids
        want_adapter = ids.get(adapter) if adapter else None
        status = reports.STATUSES.index(filter) if filter in ("failed", "passed", "errored") else None
        mode = ids.get(filter) if filter and filter not in ("all", "failed", "passed", "errored") else None
        nothing = (adapter and want_adapter is None) or (mode is None and status is None and filter
                                                         and filter != "all")
        if nothing:
            picked: Sequence[int] = []
        elif want_adapter is None and status is None and mode is None:
            picked = range(len(index))  # every case: nothing to scan (a million-item run)
        elif [want_adapter, status, mode].count(None) == 2 and (status is not None or index.narrow):
            # one filter: its column as one byte a value, searched in C (a million-case run's page)
            col, value = ((index.status, status) if status is not None else
                          (index.adapter, want_adapter) if want_adapter is not None else (index.mode, mode))
            picked = _where(_low_bytes(col), value)
        else:
            picked = [i for i in range(len(index))
                      if (want_adapter is None or index.adapter[i] == want_adapter)
                      and (status is None or index.status[i] == status) and (mode is None or index.mode[i] == mode)]
        per_page = max(1, min(PAGE_MAX, per_page))
        total = len(picked)
        pages = max(1, -(-total // per_page))
        page = max(1, min(page, pages))
        shown = picked[(page - 1) * per_page: page * per_page]
        rows = [views.case_row(i, item.values, reports.PREVIEW_CHARS)
                for i, item in zip(shown, reports.read_items(path, index, shown, reports.PREVIEW_CHARS))]
        return {"run_id": rid, "filter": filter or "all", "adapter": adapter, "total": total, "page": page,
                "pages": pages, "per_page": per_page, "cases": rows}

    def case(self, rid: str, i: int) -> dict[str, Any]:
        path, index = self._current(rid)
        if not 0 <= i < len(index):
            raise BadRef(f"run {rid} has no case {i}", 404)
        item = reports.read_item(path, index, i)
        o = views.outcome(i, item.values, item.cut, reports.SHOWN_CHARS)
        o["dropped"] = {safe.text(k, 80): safe.text(v, 200) for k, v in item.dropped.items()}
        prompt = reports.read_prompt(path, index, o["prompt_id"]) if index.prompts else None
        o["input"] = views.input_of(item.values, prompt.values if prompt else None, reports.SHOWN_CHARS)
        o["input_source"] = "report" if o["input"] is not None else None
        o["run"] = {"run_id": rid, "spec_name": views.summary(index.head, rid)["spec_name"]}
        if o["output"] is not None:
            o["output_url"] = f"/runs/{rid}/cases/{i}/output"
        return o

    def output(self, rid: str, i: int) -> Iterator[str]:
        """Case ``i``'s whole output, decoded a piece at a time (never held whole)."""
        path, index = self._current(rid)
        if not 0 <= i < len(index):
            raise BadRef(f"run {rid} has no case {i}", 404)
        stream = reports.iter_output(path, index, i)
        if stream is None:
            raise BadRef(f"case {i} of run {rid} has no output", 404)
        return stream

    # -- diff -----------------------------------------------------------------------------------
    def diff(self, a_ref: str, b_ref: str, alpha: float = 0.05, limit: int = 200) -> dict[str, Any]:
        """Per-adapter deltas and the case classes (regressed first) with McNemar's p; each listed
        case carries both runs' outputs (cut), trial by trial, read from the files as listed."""
        a_id, b_id = self.registry.resolve(a_ref), self.registry.resolve(b_ref)
        (pa, ia), (pb, ib) = self._current(a_id), self._current(b_id)
        a, b = _as_report(a_id, ia), _as_report(b_id, ib)
        adapters = diff_reports(a, b)
        cases = compare_cases(a, b, alpha=alpha)
        by_a, by_b = _by_case(ia), _by_case(ib)
        listed = {cls: [(r, r.get("adapter_b", r["adapter"])) for r in (cases.get(cls) or [])[:limit]]
                  for cls in CLASSES}
        # the outputs of every listed case, read through one open file per run
        sides_a = _sides(pa, ia, [i for rows in listed.values() for r, _ in rows
                                  for i in by_a.get((r["adapter"], r["case"]), [])])
        sides_b = _sides(pb, ib, [i for rows in listed.values() for r, ab in rows
                                  for i in by_b.get((ab, r["case"]), [])])
        classes = []
        for cls in CLASSES:
            shown = [{"adapter": r["adapter"], "adapter_b": ab, "case": r["case"],
                      "a": [sides_a[i] for i in by_a.get((r["adapter"], r["case"]), [])],
                      "b": [sides_b[i] for i in by_b.get((ab, r["case"]), [])]} for r, ab in listed[cls]]
            count = len(cases.get(cls) or [])
            classes.append({"class": cls, "count": count, "cases": shown, "truncated": count > limit})
        sa, sb = views.summary(ia.head, a_id), views.summary(ib.head, b_id)
        return {"a": {"ref": a_ref, "run_id": a_id, "spec_name": sa["spec_name"]},
                "b": {"ref": b_ref, "run_id": b_id, "spec_name": sb["spec_name"]},
                "per_adapter": adapters["per_adapter"], "overall_delta": adapters["overall_delta"],
                "winner": adapters["winner"], "counts": cases["counts"], "mcnemar": cases["mcnemar"],
                "per_adapter_cases": cases["per_adapter"], "pairing": cases["pairing"],
                "only_in_a": len(cases["only_in_a"]), "only_in_b": len(cases["only_in_b"]),
                "note": cases["note"], "classes": classes}


def _low_bytes(col) -> bytes:
    """A column whose values are all below 256 as one byte a value."""
    if col.itemsize == 1:
        return col.tobytes()
    data = col.tobytes()
    return data[0::col.itemsize] if sys.byteorder == "little" else data[col.itemsize - 1::col.itemsize]


class _where(Sequence):
    """The positions of one byte value in ``data`` (a status column), counted in C and found on demand:
    a page of a million-case run reads only up to the cases it shows."""

    def __init__(self, data: bytes, value: int) -> None:
        self.data, self.byte = data, bytes([value])
        self.n = data.count(self.byte)
        self.found: list[int] = []

    def __len__(self) -> int:
        return self.n

    def _upto(self, k: int) -> None:
        at = self.found[-1] + 1 if self.found else 0
        while len(self.found) <= k:
            at = self.data.find(self.byte, at)
            if at < 0:
                break
            self.found.append(at)
            at += 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self.n)
            if stop > start:
                self._upto(stop - 1)
            return self.found[start:stop:step]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        self._upto(i)
        return self.found[i]


def _as_report(rid: str, index: Index) -> dict[str, Any]:
    """The shape evalfarm.ci.diff expects, from the index and the head's normalised figures only."""
    per = views.summary(index.head, rid)["per_adapter"]
    outcomes = []
    for i in range(len(index)):
        s = reports.STATUSES[index.status[i]]
        outcomes.append({"adapter": index.names[index.adapter[i]], "prompt_id": index.names[index.case[i]],
                         "trial": index.trial[i], "error": {"class": "Error"} if s == "errored" else None,
                         "passed": True if s == "passed" else False if s == "failed" else None})
    return {"run_id": rid, "per_adapter": {a: dict(f) for a, f in per.items()}, "outcomes": outcomes}


def _by_case(index: Index) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for i in range(len(index)):
        out.setdefault((index.names[index.adapter[i]], index.names[index.case[i]]), []).append(i)
    for v in out.values():
        v.sort(key=lambda i: index.trial[i])
    return out


def _sides(path: Path, index: Index, ids: list[int]) -> dict[int, dict[str, Any]]:
    items = reports.read_items(path, index, ids, DIFF_OUTPUT_CHARS)
    return {i: views.side(i, item.values, DIFF_OUTPUT_CHARS, "output" in item.cut) for i, item in zip(ids, items)}
