"""The one stylesheet and the one script, served from /static/ (no CDN; works offline).

The script only ever puts untrusted values into the page with ``textContent`` and
``setAttribute`` on elements it creates, never ``innerHTML``; the CSP forbids inline script.
"""

CSS = """
:root { --fg:#1d232a; --muted:#66707a; --line:#d9dee3; --bg:#fbfcfd; --pass:#1f8a4c; --fail:#c0392b;
        --warn:#b9770e; --bar:#3b6fb6; --accent:#2c5aa0; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; gap:1.5em; align-items:center; padding:.6em 1.2em; background:#1d2b3a; color:#fff; }
header a { color:#cfe0f5; text-decoration:none; margin-right:1em; } header a.on, header a:hover { color:#fff; font-weight:600; }
.brand { font-weight:700; color:#fff !important; } .where { margin-left:auto; color:#9fb3c8; font-size:12px; }
main { padding:1em 1.5em 3em; max-width:1500px; }
h1 { font-size:20px; margin:.3em 0 .6em; } h1 small, h2 small { color:var(--muted); font-weight:400; font-size:13px; }
h2 { font-size:16px; margin:1.2em 0 .5em; } h3 { font-size:14px; margin:.8em 0 .3em; }
table { border-collapse:collapse; width:100%; background:#fff; } th, td { border-bottom:1px solid var(--line); padding:4px 8px; text-align:left; vertical-align:top; }
th { font-weight:600; color:var(--muted); font-size:12px; } tr:hover td { background:#f3f6fa; }
a { color:var(--accent); } code { font-size:12px; }
.meta { color:var(--muted); } .warn { color:var(--warn); } .empty { color:var(--muted); font-style:italic; }
.verdict, .gatev { display:inline-block; padding:0 .5em; border-radius:3px; font-size:12px; font-weight:700; background:#e7eaee; }
ul.brakes { list-style:none; padding:0; }
.v-pass { background:#d8f0e0; color:var(--pass); } .v-fail, .v-unreadable { background:#f7dcd8; color:var(--fail); }
.v-nothing, .v-partial { background:#fbeed5; color:var(--warn); }
.baseline { color:#8a6d00; font-weight:600; font-size:12px; }
.s-passed { color:var(--pass); } .s-failed { color:var(--fail); } .s-errored { color:var(--warn); }
.mode { font-size:12px; background:#eef; padding:0 .4em; border-radius:3px; }
.filters { display:flex; gap:1em; flex-wrap:wrap; align-items:center; margin:.5em 0 1em; }
.charts { display:flex; flex-wrap:wrap; gap:2em; } .charts section { min-width:360px; }
pre { white-space:pre-wrap; word-break:break-word; background:#f4f6f8; border:1px solid var(--line); padding:.6em; margin:.3em 0; max-height:32em; overflow:auto; }
pre.diff .d-add { color:var(--pass); background:#e6f4ea; }
pre.diff .d-del { color:var(--fail); background:#fbe9e7; }
pre.diff .d-hunk { color:var(--accent); } pre.diff .d-file { font-weight:700; }
.io, .sides { display:grid; grid-template-columns:1fr 1fr; gap:1em; }
details.diff-case { border:1px solid var(--line); background:#fff; margin:.3em 0; padding:.3em .6em; }
details.diff-case summary { cursor:pointer; }
.count { margin-right:.8em; } .c-regressed b { color:var(--fail); } .c-fixed b { color:var(--pass); }
.pager { margin:.8em 0; display:flex; gap:1em; }
.preview { color:var(--muted); max-width:40em; overflow:hidden; text-overflow:ellipsis; white-space:nowrap; }
ul.checks { list-style:none; padding:0; } ul.failures { color:var(--fail); }
svg text { font-size:11px; fill:var(--fg); } svg .track { fill:#edf0f3; } svg .bar { fill:var(--bar); }
svg .bar.ok { fill:var(--pass); } svg .bar.below { fill:var(--fail); }
svg .threshold { stroke:#111; stroke-width:2; } svg .axis { stroke:var(--muted); }
svg .zero { stroke:#555; stroke-dasharray:4 3; } svg .interval, svg .whisker { stroke:var(--accent); stroke-width:2; }
svg .round { stroke:var(--accent); stroke-width:3; } svg .round.decided { stroke:#2a7a2a; } svg .estimate { fill:none; stroke:#888; } svg .margin { stroke:#b80; stroke-dasharray:2 2; } svg .stop { stroke:#c33; stroke-width:1.5; }
svg .point { fill:var(--fail); } svg .empty { fill:var(--muted); font-style:italic; }
progress { width:120px; }
"""

JS = r"""
"use strict";
(function () {
  function el(tag, text, attrs) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }
  function row(cells) {
    var tr = el("tr");
    cells.forEach(function (c) { if (c instanceof Node) { var td = el("td"); td.appendChild(c); tr.appendChild(td); } else tr.appendChild(el("td", c)); });
    return tr;
  }
  function fmt(x, d) { return (x === null || x === undefined) ? "n/a" : Number(x).toFixed(d === undefined ? 1 : d); }
  function dur(s) {
    if (s === null || s === undefined) return "n/a";
    s = Math.round(s); if (s < 60) return s + " s";
    var m = Math.floor(s / 60); if (m < 60) return m + " min " + (s % 60) + " s";
    return Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  function replace(tbody, rows, empty, cols) {
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    if (!rows.length) { var tr = el("tr"); tr.appendChild(el("td", empty, {colspan: String(cols), "class": "empty"})); tbody.appendChild(tr); }
    rows.forEach(function (r) { tbody.appendChild(r); });
  }

  // --- the run page: filter and page through the cases without a reload ---------------------------
  var cases = document.getElementById("cases");
  if (cases) {
    var runId = cases.getAttribute("data-run");
    var form = document.getElementById("case-filter");
    var state = {page: Number(document.getElementById("case-pager").getAttribute("data-page")) || 1};
    var load = function () {
      var q = new URLSearchParams({filter: form.elements.filter.value, adapter: form.elements.adapter.value, page: String(state.page)});
      fetch("/api/runs/" + encodeURIComponent(runId) + "/cases?" + q.toString(), {credentials: "same-origin"})
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
        .then(function (data) {
          var rows = data.cases.map(function (c) {
            var link = el("a", c.index, {href: "/runs/" + encodeURIComponent(runId) + "/cases/" + c.index, "class": "case-link"});
            var tr = row([link, c.adapter, c.prompt_id, c.trial, c.status, c.failure_mode || "", fmt(c.latency_ms, 1),
                          c.judge_score === null ? "n/a" : fmt(c.judge_score, 3), c.error_class || c.output_preview]);
            tr.className = "case-row"; tr.children[4].className = "s-" + c.status; tr.children[8].className = "preview";
            return tr;
          });
          replace(document.getElementById("case-rows"), rows, "no cases match", 9);
          state.page = data.page; state.pages = data.pages;
          document.getElementById("case-total").textContent = String(data.total);
          document.getElementById("case-page").textContent = "page " + data.page + " of " + data.pages;
          document.getElementById("case-prev").hidden = data.page <= 1;
          document.getElementById("case-next").hidden = data.page >= data.pages;
          q.delete("page"); if (data.page > 1) q.set("page", String(data.page));
          history.replaceState(null, "", "?" + q.toString() + "#cases");
        }).catch(function (e) { document.getElementById("case-total").textContent = "failed to load: " + e.message; });
    };
    form.addEventListener("change", function () { state.page = 1; load(); });
    form.addEventListener("submit", function (ev) { ev.preventDefault(); state.page = 1; load(); });
    document.getElementById("case-prev").addEventListener("click", function (ev) { ev.preventDefault(); state.page -= 1; load(); });
    document.getElementById("case-next").addEventListener("click", function (ev) { ev.preventDefault(); state.page += 1; load(); });
  }

  // --- the farm page: live over server-sent events, polling if they fail --------------------------
  var farmRuns = document.getElementById("farm-runs");
  if (farmRuns) {
    var status = document.getElementById("farm-status");
    var render = function (s) {
      if (!s.ok) { status.textContent = "error: " + s.error; status.className = "warn"; return; }
      status.className = "meta";
      status.textContent = "live · updated " + new Date(s.at * 1000).toLocaleTimeString();
      var runs = s.runs.slice().sort(function (a, b) { return (b.running - a.running); });
      replace(farmRuns, runs.map(function (r) {
        var link = el("a", r.run_id, {href: "/runs/" + encodeURIComponent(r.run_id)});
        var done = el("span", r.done + " / " + r.total, {"class": "farm-done", "data-run": r.run_id, "data-done": String(r.done), "data-total": String(r.total)});
        var bar = el("progress", null, {max: String(r.total || 1), value: String(r.done)});
        var state = r.settling ? r.state + " (counts settling after a Redis restart)" : r.state;
        var tr = row([link, r.spec_name, state, done, bar, fmt(r.rate_per_s, 1), r.running ? dur(r.eta_s) : "—",
                      r.errors, r.pending_judge, "$" + fmt(r.spend_usd, 6)]);
        tr.setAttribute("data-run", r.run_id); tr.className = "farm-run" + (r.running ? " running" : "");
        return tr;
      }), "no runs in the store", 10);
      replace(document.getElementById("farm-queues"), s.queues.map(function (q) { var tr = row([q.pool, q.queued, q.unacked]); tr.setAttribute("data-pool", q.pool); return tr; }), "no queues", 3);
      replace(document.getElementById("farm-workers"), s.workers.map(function (w) {
        var tr = row([w.name, w.host + (w.pid ? " pid " + w.pid : ""), w.queues.join(", "), w.age_s === null ? "n/a" : fmt(w.age_s, 0) + " s ago"]);
        tr.className = "farm-worker"; return tr;
      }), "no worker heartbeat seen (workers write ef:worker:<name>)", 4);
      replace(document.getElementById("farm-pauses"), s.pauses.map(function (p) { return row([p.endpoint, fmt(p.remaining_ms / 1000, 1) + " s"]); }), "none", 2);
    };
    var poll = function () {
      fetch("/api/farm", {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(render)
        .catch(function (e) { status.textContent = "error: " + e.message; })
        .finally(function () { setTimeout(poll, 2000); });
    };
    if (window.EventSource) {
      var es = new EventSource("/api/farm/stream");
      es.onmessage = function (ev) { render(JSON.parse(ev.data)); };
      es.onerror = function () { if (es.readyState === EventSource.CLOSED) { poll(); } };
    } else { poll(); }
  }
})();
"""
