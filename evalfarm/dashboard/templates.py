"""The pages' Jinja2 templates, kept in Python so a plain ``pip install .`` ships them (the
package declares no package data). Rendered with autoescape on: every ``{{ }}`` is escaped;
the only ``Markup`` values are the SVG charts, which escape their own labels (svg.py)."""

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}{% endblock %} · evalfarm</title>
<link rel="stylesheet" href="/static/app.css"></head>
<body data-page="{{ page }}">
<header><a class="brand" href="/runs">evalfarm</a>
<nav>{% for href, label in [("/runs", "Runs"), ("/diff", "Diff"), ("/ab", "A/B"), ("/farm", "Farm")] %}
<a href="{{ href }}"{% if nav == label %} class="on"{% endif %}>{{ label }}</a>{% endfor %}</nav>
<span class="where">state {{ state_dir }}{% if broker %} · farm {{ broker }}{% endif %}</span></header>
<main>{% block main %}{% endblock %}</main>
<script src="/static/app.js"></script>
</body></html>
"""

RUNS = """{% extends "base.html" %}{% block title %}Runs{% endblock %}{% block main %}{% from "pager.html" import pager %}
<h1>Runs <small>{{ data.total }} shown of this filter</small></h1>
{% if data.registry_error %}<p class="warn">registry unreadable: {{ data.registry_error }}</p>{% endif %}
<form class="filters" method="get" action="/runs">
{% for field in ["spec", "tag", "adapter", "verdict"] %}
<label>{{ field }} <select name="{{ field }}"><option value="">any</option>
{% for v in data.filters[field] %}<option{% if args[field] == v %} selected{% endif %}>{{ v }}</option>{% endfor %}
</select></label>{% endfor %}
<button type="submit">filter</button> <a href="/runs">clear</a></form>
<form method="get" action="/diff" id="compare">
<table class="runs"><thead><tr><th title="diff: before">a</th><th title="diff: after">b</th><th>run</th><th>finished</th>
<th>spec</th><th>tag</th><th>adapters</th><th>verdict</th><th>pass rate</th><th>items</th><th>cost $</th><th>duration</th>
<th>baseline</th></tr></thead><tbody>
{% for r in data.runs %}<tr class="run-row" data-run="{{ r.run_id }}">
<td><input type="radio" name="a" value="{{ r.run_id }}"></td><td><input type="radio" name="b" value="{{ r.run_id }}"></td>
<td><a class="run-link" href="/runs/{{ r.run_id | urlencode }}">{{ r.run_id }}</a></td>
<td>{{ r.finished_at | ts }}</td><td class="spec">{{ r.spec_name }}</td><td>{{ r.lineage_tag }}</td>
<td>{{ r.adapters | join(", ") }}</td>
<td><span class="verdict v-{{ r.verdict | lower }}"{% if r.problems %} title="{{ r.problems | join('; ') }}"{% endif %}>{{ r.verdict }}</span>{% if r.gate %} <span class="gatev v-{{ 'pass' if r.gate.passed else 'fail' }}" title="the gate's verdict">gate {{ r.gate.verdict }}</span>{% endif %}</td>
<td>{{ r.pass_rate | pct }}</td><td class="items">{{ r["items"] }}</td><td>{{ r.cost.total_usd | usd }}</td><td>{{ r.duration_s | dur }}</td>
<td>{% for b in r.baselines %}<span class="baseline">★ {{ b }}</span> {% endfor %}</td></tr>
{% else %}<tr><td colspan="13" class="empty">no runs{% if args.values() | select | list %} match this filter{% else %} under {{ state_dir }}/runs yet: <code>evalfarm run SPEC --state-dir {{ state_dir }}</code>{% endif %}</td></tr>{% endfor %}
</tbody></table>
<p><button type="submit">diff a → b</button></p></form>
{{ pager(data, "/runs", args) }}
{% endblock %}"""

PAGER = """{% macro pager(data, base, args) %}{% if data.pages > 1 %}<nav class="pager">
{% if data.page > 1 %}<a href="{{ base }}?{{ args | qs(page=data.page - 1) }}">← newer</a>{% endif %}
page {{ data.page }} of {{ data.pages }}
{% if data.page < data.pages %}<a href="{{ base }}?{{ args | qs(page=data.page + 1) }}">older →</a>{% endif %}
</nav>{% endif %}{% endmacro %}"""

RUN = """{% extends "base.html" %}{% block title %}Run {{ run.run_id }}{% endblock %}{% block main %}
<h1>Run <code>{{ run.run_id }}</code> <span class="verdict v-{{ run.verdict | lower }}" id="run-verdict" title="the run against its thresholds">thresholds {{ run.verdict }}</span>
{% if run.gate %}<span class="verdict v-{{ 'pass' if run.gate.passed else 'fail' }}" id="gate-verdict" title="evalfarm gate's verdict">gate {{ run.gate.verdict }}</span>{% endif %}
{% for b in run.baselines %}<span class="baseline">★ baseline {{ b }}</span>{% endfor %}</h1>
<p class="meta">spec <b class="spec">{{ run.spec_name }}</b> · tag {{ run.lineage_tag }} · mode {{ run.mode }} ·
trials {{ run.trials }} · finished {{ run.finished_at | ts }} · {{ run.duration_s | dur }}
{% if run.prompt %} · prompt {{ run.prompt }}{% endif %}{% if run.judge %} · judge {{ run.judge.provider }}/{{ run.judge.model }}{% endif %}
· <a href="/api/runs/{{ run.run_id | urlencode }}">JSON</a></p>
{% for p in run.problems %}<p class="warn">{{ p }}</p>{% endfor %}
{% if run.gate %}<section id="gate"><h2>Gate <small>{{ run.gate.verdict }}{% if run.gate.baseline %} against baseline {{ run.gate.baseline.name or "" }} (run {{ run.gate.baseline.run_id }}){% else %} (no baseline){% endif %}</small></h2>
<ul class="brakes">{% for b in run.gate.brakes %}<li class="brake {{ 's-failed' if b.status == 'fail' else 's-passed' if b.status == 'pass' else 'meta' }}" data-brake="{{ b.name }}">{{ b.name }} {{ b.status | upper }}: {{ b.summary }}</li>{% endfor %}</ul></section>{% endif %}
{% if run.threshold_failures %}<ul class="failures">{% for f in run.threshold_failures %}<li>{{ f }}</li>{% endfor %}</ul>{% endif %}
<section><h2>Per adapter</h2>
<table class="adapters"><thead><tr><th>adapter</th><th>items</th><th>errors</th>
{% for m in score_fields %}<th>{{ m | replace("_", " ") }}{% if run.thresholds.get(threshold_of[m]) is not none %} <small>(min {{ run.thresholds[threshold_of[m]] | pct }})</small>{% endif %}</th>{% endfor %}
<th>p50 / p95 ms</th><th>model $</th><th>judge $</th></tr></thead><tbody>
{% for a, f in run.per_adapter.items() %}<tr><td class="adapter">{{ a }}</td><td>{{ f["items"] }}</td><td>{{ f.errors }}</td>
{% for m in score_fields %}<td>{{ score_bar(f[m], run.thresholds.get(threshold_of[m]), label=a ~ " " ~ m) }}</td>{% endfor %}
<td>{{ f.latency_ms_p50 | num }} / {{ f.latency_ms_p95 | num }}</td><td>{{ f.cost_usd | usd }}</td><td>{{ f.judge_cost_usd | usd }}</td></tr>
{% endfor %}</tbody></table></section>
<div class="charts">
<section><h2>Failure taxonomy</h2>{{ taxonomy_svg }}</section>
<section><h2>Latency</h2>{{ latency_svg }}</section>
<section><h2>Cost</h2>{{ cost_svg }}
<p class="meta">models {{ run.cost.model_usd | usd }} ({{ run.cost.model_tokens }} tokens) · judge {{ run.cost.judge_usd | usd }}
({{ run.cost.judge_tokens }} tokens) · total {{ run.cost.total_usd | usd }}</p></section>
</div>
<section id="cases" data-run="{{ run.run_id }}"><h2>Cases <small id="case-total">{{ cases.total }}</small></h2>
<form class="filters" id="case-filter" method="get" action="/runs/{{ run.run_id | urlencode }}#cases">
<label>show <select name="filter">{% for f in run.case_filters %}<option value="{{ f }}"{% if cases.filter == f %} selected{% endif %}>{{ f | replace("_", " ") }}{% if f in mode_counts %} ({{ mode_counts[f] }}){% endif %}</option>{% endfor %}</select></label>
<label>adapter <select name="adapter"><option value="">any</option>{% for a in run.per_adapter %}<option{% if cases.adapter == a %} selected{% endif %}>{{ a }}</option>{% endfor %}</select></label>
<noscript><button type="submit">filter</button></noscript></form>
<table class="cases"><thead><tr><th>#</th><th>adapter</th><th>case</th><th>trial</th><th>status</th><th>failure mode</th>
<th>latency ms</th><th>judge</th><th>output</th></tr></thead><tbody id="case-rows">
{% for c in cases.cases %}<tr class="case-row"><td><a class="case-link" href="/runs/{{ run.run_id | urlencode }}/cases/{{ c.index }}">{{ c.index }}</a></td>
<td>{{ c.adapter }}</td><td>{{ c.prompt_id }}</td><td>{{ c.trial }}</td><td class="s-{{ c.status }}">{{ c.status }}</td>
<td>{{ c.failure_mode or "" }}</td><td>{{ c.latency_ms | num }}</td><td>{{ c.judge_score | num }}</td>
<td class="preview">{{ c.error_class or c.output_preview }}</td></tr>
{% else %}<tr><td colspan="9" class="empty">no cases match</td></tr>{% endfor %}
</tbody></table>
<nav class="pager" id="case-pager" data-page="{{ cases.page }}" data-pages="{{ cases.pages }}">
<a id="case-prev" href="?{{ case_args | qs(page=cases.page - 1) }}#cases"{% if cases.page <= 1 %} hidden{% endif %}>← prev</a>
<span id="case-page">page {{ cases.page }} of {{ cases.pages }}</span>
<a id="case-next" href="?{{ case_args | qs(page=cases.page + 1) }}#cases"{% if cases.page >= cases.pages %} hidden{% endif %}>next →</a></nav>
</section>
{% endblock %}"""

TIMELINE = """{% macro timeline(t, sha, id="trajectory") %}<section id="{{ id }}" class="trajectory"><h2>Trajectory <small>{{ t.agent }}: {{ t.steps | length }} steps{% if t.input_tokens is not none %} · {{ t.input_tokens | num }} tokens in / {{ t.output_tokens | num }} out{% endif %}</small></h2>
{% if t.missing %}<p class="warn" id="trajectory-missing">trajectory {{ sha[:12] }} not shown: {{ t.missing }}</p>{% else %}
<p class="meta" id="trajectory-sources">sources: {{ t.sources | join(" and ") or "agent" }}{% if t.relay_only %} · {{ t.relay_only }}{% endif %}</p>
{% if t.mismatch %}<p class="warn" id="trajectory-mismatch">MISMATCH: {{ t.mismatch }}</p>{% endif %}
<ol class="timeline">{% for s in t.steps %}<li class="step step-{{ s.source }}" data-source="{{ s.source }}"{% if s.only %} data-only="{{ s.only }}"{% endif %}>
<span class="meta">{{ s.source | replace("_", " ") }}{% if s.timestamp %} · {{ s.timestamp }}{% endif %}{% if s.only %} · <span class="warn only">seen by the {{ s.only }} only</span>{% endif %}</span>
{% if s.source == "model_call" %}<span class="tokens">{{ s.model or "" }} · {{ s.input_tokens | num }} tokens in{% if s.cached_input_tokens %} ({{ s.cached_input_tokens | num }} cached){% endif %}{% if s.output_tokens is not none %} / {{ s.output_tokens | num }} out{% endif %}{% if s.scope %} (per {{ s.scope }}){% endif %}{% if s.latency_ms is not none %} · {{ s.latency_ms | num }} ms{% endif %}{% if s.cost_usd %} · {{ s.cost_usd | usd }}{% endif %}</span>
{% elif s.source == "agent" %}<pre class="agent-text{% if s.thinking %} thinking{% endif %}">{{ s.text }}</pre>
{% elif s.source == "tool_call" %}<b class="tool-name">{{ s.name }}</b><pre class="tool-args">{{ s.arguments }}</pre>
{% else %}<details class="tool-result"><summary>result{% if s.is_error %} (error){% endif %}{% if s.exit_code is not none %} · exit {{ s.exit_code | num }}{% endif %}{% if s.original_chars %} · cut from {{ s.original_chars | num }} characters{% endif %}</summary><pre>{{ s.content }}</pre></details>{% endif %}
</li>{% endfor %}</ol>{% if t.not_shown %}<p class="warn">{{ t.not_shown }} more steps not shown</p>{% endif %}{% endif %}
</section>{% endmacro %}"""

CASE = """{% extends "base.html" %}{% from "timeline.html" import timeline %}{% block title %}Case {{ c.index }}{% endblock %}{% block main %}
<p><a href="/runs/{{ c.run.run_id | urlencode }}#cases">← run {{ c.run.run_id }}</a> · spec <span class="spec">{{ c.run.spec_name }}</span></p>
<h1>{{ c.adapter }} / {{ c.prompt_id }} <small>trial {{ c.trial }}</small> <span class="s-{{ c.status }}">{{ c.status }}</span>
{% if c.failure_mode %}<span class="mode">{{ c.failure_mode }}</span>{% endif %}{% if c.failure_class %} <span class="mode" id="failure-class">{{ c.failure_class }}</span>{% endif %}</h1>
<p class="meta">latency {{ c.latency_ms | num }} ms · finish {{ c.finish_reason or "n/a" }} · tokens {{ c.input_tokens }} in / {{ c.output_tokens }} out
· model {{ c.cost_usd | usd }} · judge {{ c.judge_cost_usd | usd }} ({{ c.judge_input_tokens + c.judge_output_tokens }} tokens)
{% if c.attempts %} · {{ c.attempts | num }} attempt(s){% endif %}{% if c.cached %} · from cache{% endif %}
· <a href="/api/runs/{{ c.run.run_id | urlencode }}/cases/{{ c.index }}">JSON</a></p>
{% if c.error %}<section class="error"><h2>Runtime error</h2><p><b>{{ c.error.class }}</b>{% if c.error.stage %} at {{ c.error.stage }}{% endif %}{% if c.error.status %} (status {{ c.error.status }}){% endif %}</p><pre>{{ c.error.message }}</pre></section>{% endif %}
<div class="io"><section><h2>Input</h2>{% if c.input is not none %}<pre id="case-input">{{ c.input }}</pre><p class="meta">from the {{ c.input_source }}</p>
{% else %}<p class="meta" id="case-input">not recorded: this report carries prompt ids only{% if not broker %}, and serve has no --broker to read the farm's run store{% else %}, and the farm's run store no longer has this run's items{% endif %}</p>{% endif %}</section>
<section><h2>Output</h2>{% if c.output is not none %}<pre id="case-output">{{ c.output }}</pre>{% if c.output_truncated %}<p class="warn" id="output-cut">the first {{ c.output | length }} characters shown{% if c.output_bytes %} (the whole output: about {{ c.output_bytes }} bytes){% endif %}</p>{% endif %}
<p class="meta"><a id="output-download" href="/runs/{{ c.run.run_id | urlencode }}/cases/{{ c.index }}/output" download>download the whole output</a></p>{% else %}<p class="meta">no output</p>{% endif %}
{% for k, why in c.dropped.items() %}<p class="warn">{{ k }} not shown: {{ why }}</p>{% endfor %}</section></div>
{% if c.trajectory %}{{ timeline(c.trajectory, c.trajectory_sha256) }}{% endif %}
{% if c.patch %}<section id="patch"><h2>Patch <small>{{ c.patch.bytes | num if c.patch.bytes is defined else "" }} bytes</small></h2>
{% if c.patch.missing %}<p class="warn">patch {{ c.artifacts.patch[:12] }} not shown: {{ c.patch.missing }}</p>{% else %}
<pre class="diff">{% for cls, line in c.patch.lines %}<span class="d-{{ cls }}">{{ line }}</span>
{% endfor %}</pre>{% if c.patch.cut %}<p class="warn">the first {{ c.patch.lines | length }} lines shown</p>{% endif %}{% endif %}</section>{% endif %}
{% if c.log %}<section id="check-log"><h2>Check log</h2>
{% if c.log.missing %}<p class="warn">check log {{ c.artifacts.log[:12] }} not shown: {{ c.log.missing }}</p>{% else %}
<pre class="check-log">{{ c.log.text }}</pre>{% if c.log.cut %}<p class="warn">the first part shown of {{ c.log.bytes | num }} bytes</p>{% endif %}{% endif %}</section>{% endif %}
<section><h2>Checks <small>golden: {{ "pass" if c.golden_passed else "fail" if c.golden_passed is false else "n/a" }}</small></h2>
{% if c.golden_reason %}<p>{{ c.golden_reason }}</p>{% endif %}
<table class="checks"><thead><tr><th>check</th><th>verdict</th><th>reason</th></tr></thead><tbody>
{% for k in c.checks %}<tr class="check-row"><td>{{ k.kind }}{% if k.format %} <small>(format)</small>{% endif %}</td><td class="{{ 's-passed' if k.passed else 's-failed' }}">{{ "pass" if k.passed else "fail" }}</td><td>{{ k.reason }}</td></tr>
{% else %}<tr><td colspan="3" class="empty">no checks</td></tr>{% endfor %}</tbody></table></section>
<section><h2>Judge <small>score {{ c.judge_score | num }}</small></h2>{% if c.judge_reason %}<p>{{ c.judge_reason }}</p>{% endif %}
<table class="criteria"><thead><tr><th>criterion</th><th>weight</th><th>verdict</th><th>reason</th></tr></thead><tbody>
{% for k in c.judge_criteria %}<tr class="criterion-row"><td>{{ k.id }}</td><td>{{ k.weight | num }}</td><td class="{{ 's-passed' if k.verdict == 'pass' else 's-failed' }}">{{ k.verdict }}</td><td>{{ k.reason }}</td></tr>
{% else %}<tr><td colspan="4" class="empty">no judge criteria{% if c.judge_score is not none %} (a single rubric score){% endif %}</td></tr>{% endfor %}</tbody></table></section>
{% endblock %}"""

DIFF = """{% extends "base.html" %}{% block title %}Diff{% endblock %}{% block main %}
<h1>Diff</h1>
<form class="filters" method="get" action="/diff">
<label>a (before) <input name="a" list="refs" value="{{ args.a }}" size="34"></label>
<label>b (after) <input name="b" list="refs" value="{{ args.b }}" size="34"></label>
<datalist id="refs">{% for r in refs %}<option value="{{ r }}">{% endfor %}</datalist>
<button type="submit">compare</button></form>
{% if error %}<p class="warn">{{ error }}</p>{% endif %}
{% if d %}
<p class="meta">a <a href="/runs/{{ d.a.run_id | urlencode }}">{{ d.a.run_id }}</a> ({{ d.a.ref }}, <span class="spec">{{ d.a.spec_name }}</span>) →
b <a href="/runs/{{ d.b.run_id | urlencode }}">{{ d.b.run_id }}</a> ({{ d.b.ref }}, <span class="spec">{{ d.b.spec_name }}</span>)</p>
<table class="adapters"><thead><tr><th>adapter</th><th>overall a</th><th>overall b</th><th>delta</th><th>winner</th></tr></thead><tbody>
{% for a, r in d.per_adapter.items() %}<tr><td>{{ a }}</td><td>{{ r.overall_a | num }}</td><td>{{ r.overall_b | num }}</td>
<td>{{ r.overall_delta | signed }}</td><td>{{ r.winner }}</td></tr>{% endfor %}</tbody></table>
{% if d.note %}<p class="meta">{{ d.note }}</p>{% else %}
<p class="summary" id="mcnemar">{% for k in ["regressed", "fixed", "still_broken", "stable", "unmeasured"] %}<span class="count c-{{ k }}">{{ k | replace("_", " ") }} <b>{{ d.counts[k] }}</b></span> {% endfor %}
· McNemar ({{ d.mcnemar.method }}, {{ d.mcnemar.discordant }} discordant): <b>p = {{ d.mcnemar.p_value | pval }}</b>
{% if d.mcnemar.significant %}<span class="verdict v-fail">significant at α {{ d.mcnemar.alpha }}</span>{% else %}<span class="verdict">not significant at α {{ d.mcnemar.alpha }}</span>{% endif %}
{% if d.mcnemar.pass_rate_a is defined %} · pass rate {{ d.mcnemar.pass_rate_a | pct }} → {{ d.mcnemar.pass_rate_b | pct }}{% endif %}</p>{% endif %}
{% for cls in d.classes %}{% if cls.count %}<section class="diff-class" data-class="{{ cls.class }}"><h2>{{ cls.class | replace("_", " ") }} <small>{{ cls.count }}{% if cls.truncated %}, first {{ cls.cases | length }} shown{% endif %}</small></h2>
{% for r in cls.cases %}<details class="diff-case" data-class="{{ cls.class }}"><summary>{{ r.adapter }}{% if r.adapter_b != r.adapter %} → {{ r.adapter_b }}{% endif %} / {{ r.case }}</summary>
<div class="sides">{% for side, label, rid in [(r.a, "a", d.a.run_id), (r.b, "b", d.b.run_id)] %}<div class="side side-{{ label }}"><h3>{{ label }}</h3>
{% for o in side %}<div class="trial"><p class="meta">trial {{ o.trial }} · <span class="s-{{ o.status }}">{{ o.status }}</span>{% if o.failure_mode %} · {{ o.failure_mode }}{% endif %} · <a href="/runs/{{ rid | urlencode }}/cases/{{ o.index }}">case</a></p>
{% if o.error %}<pre class="output">{{ o.error.class }}: {{ o.error.message }}</pre>{% else %}<pre class="output">{{ o.output or "" }}</pre>{% if o.output_truncated %}<p class="meta">cut: the case page has more</p>{% endif %}{% endif %}</div>{% endfor %}
</div>{% endfor %}</div></details>{% endfor %}</section>{% endif %}{% endfor %}
{% endif %}{% endblock %}"""

AB_LIST = """{% extends "base.html" %}{% block title %}A/B{% endblock %}{% block main %}
<h1>A/B comparisons <small>{{ rows | length }}</small></h1>
{% if audit.present %}<p class="meta">audit chain: {% if audit.ok %}<span class="verdict v-pass">intact</span> {{ audit.entries }} entries{% else %}<span class="verdict v-fail">broken</span> {{ audit.detail }}{% endif %}</p>{% endif %}
<table class="ab"><thead><tr><th>artifact</th><th>suite</th><th>executor</th><th>arms</th><th>verdict</th><th>winner</th></tr></thead><tbody>
{% for r in rows %}<tr><td><a class="ab-link" href="/ab/{{ r.sha256 }}"><code>{{ r.sha256[:16] }}</code></a></td>
{% if r.error and not r.suite %}<td colspan="5" class="warn">{{ r.error }}</td>{% else %}
<td>{{ r.suite.name }}</td><td>{{ r.executor }}</td><td>{{ r.arms | join(" · ") }}</td><td>{{ r.verdict.result }}</td><td>{{ r.verdict.winner or "" }}</td>{% endif %}</tr>
{% else %}<tr><td colspan="6" class="empty">no comparison artifacts under {{ state_dir }}/reports/eval_ab: <code>evalfarm ab --suite ...</code></td></tr>{% endfor %}
</tbody></table>{% endblock %}"""

AB = """{% extends "base.html" %}{% block title %}A/B {{ a.sha256[:12] }}{% endblock %}{% block main %}
<h1>A/B <small><code>{{ a.sha256 }}</code></small></h1>
<p class="meta">suite <b>{{ a.suite.name }}</b> ({{ a.suite.tasks }} tasks, scorer {{ a.suite.scorer }}) · executor {{ a.executor }} ·
{{ a.trials }} trial(s) · {{ a.arms_mode }} arms · <a href="/api/ab/{{ a.sha256 }}">JSON</a></p>
{% for p in a.problems %}<p class="warn">{{ p }}</p>{% endfor %}
<p class="verdict-line" id="ab-verdict"><span class="verdict v-{{ 'pass' if a.verdict.result == 'winner' else 'neutral' }}">{{ a.verdict.result | upper }}{% if a.verdict.winner %}: {{ a.verdict.winner }}{% endif %}</span>
{% if a.verdict.decided_by %} by {{ a.verdict.decided_by }}{% endif %} — {{ a.verdict.reason }}</p>
<section id="ab-verify"><h2>ab verify <small>{% if v.ok %}<span class="verdict v-pass">VERIFIED</span>{% else %}<span class="verdict v-fail">NOT VERIFIED</span>{% endif %} in {{ v.seconds }} s</small></h2>
<ul class="checks">{% for k in v.checks %}<li class="{{ 's-passed' if k.ok else 's-failed' }}">{{ "ok" if k.ok else "FAIL" }} {{ k.check }}: {{ k.detail }}</li>{% endfor %}</ul></section>
<section><h2>Arms</h2><table class="arms"><thead><tr><th>arm</th><th>role</th><th>profile</th><th>runs</th><th>pass rate</th><th>median tokens</th><th>median $</th><th>total $</th><th>not measured</th></tr></thead><tbody>
{% for r in a.arms %}<tr><td>{{ r.name }}</td><td>{{ r.role }}</td><td>{{ r.profile }}</td><td>{{ r.runs }}</td><td>{{ score_bar(r.pass_rate, label=r.name) }}</td>
<td>{{ r.median_tokens | num }}</td><td>{{ r.median_usd | usd }}</td><td>{{ r.total_usd | usd }}</td><td>{{ r.not_measured | join(", ") }}</td></tr>{% endfor %}</tbody></table></section>
<section><h2>Deltas (b − a) with 95% intervals</h2>
<p class="meta">{% for c in a.comparisons %}<b>{{ c.label }}</b>{% if c.honest %} (honest){% else %} (conflated){% endif %}: {{ c.b }} vs {{ c.a }}{% if not loop.last %} · {% endif %}{% endfor %}. An interval that crosses the dashed zero line is no evidence of a difference.</p>
{% for name, svg in interval_charts %}<h3>{{ name | replace("_", " ") }}</h3>{{ svg }}{% endfor %}</section>
{% if tasks %}<section id="ab-tasks"><h2>Tasks <small>failed by an arm first; open two arms' trajectories side by side</small></h2>
<table class="ab-tasks"><thead><tr><th>task</th><th>trial</th>{% for r in a.arms %}<th>{{ r.name }}</th>{% endfor %}<th></th></tr></thead><tbody>
{% for t in tasks %}<tr class="ab-task{% if t.failed %} failed{% endif %}" data-task="{{ t.task }}"><td>{{ t.task }}</td><td>{{ t.trial }}</td>
{% for r in a.arms %}{% set x = t.arms.get(r.name) %}<td class="{{ 's-passed' if x and x.passed else 's-failed' if x and x.passed is false else 'meta' }}">{% if x %}{{ x.class or ("pass" if x.passed else "fail" if x.passed is false else "n/a") }}{% else %}n/a{% endif %}</td>{% endfor %}
<td>{% if t.arms.values() | selectattr("trajectory") | list %}<a class="side-link" href="/ab/{{ a.sha256 }}/side?{{ {"task": t.task, "trial": t.trial} | urlencode }}">trajectories side by side</a>{% endif %}</td></tr>{% endfor %}</tbody></table></section>{% endif %}
{% if a.sequential %}{% set q = a.sequential %}<section id="ab-sequential"><h2>Sequential test <small>{{ q.method }}, alpha {{ q.alpha }}, margin ±{{ q.margin }}</small></h2>
<p class="meta" id="seq-summary"><b>{{ q.decision }}</b>{% if q.decision_round %} at round {{ q.decision_round }}{% endif %} · {{ q.rounds }} of at most {{ q.max_trials }} round(s) · stopped: {{ q.stopped_because }}
{% if q.saved_vs_max is not none %} · {{ q.saved_vs_max | num }} items fewer than {{ q.max_trials }} trials per task{% endif %}
{% if q.saved_vs_power is not none %} · {{ q.saved_vs_power | num }} items vs a fixed design sized for the observed difference ({{ q.fixed_trials | num }} trials per task){% endif %}</p>
<p class="meta">Pass rate b − a: each round's anytime-valid interval (all valid at once, so looking after every round is allowed), the estimate through them, zero dashed{% if q.margin %}, the equivalence margin{% endif %}, and where it stopped.</p>
{{ seq_chart }}</section>{% endif %}
{% endblock %}"""

AB_SIDE = """{% extends "base.html" %}{% from "timeline.html" import timeline %}{% block title %}A/B {{ sha[:12] }}: {{ task }}{% endblock %}{% block main %}
<p><a href="/ab/{{ sha }}#ab-tasks">← A/B {{ sha[:12] }}</a></p>
<h1>{{ task }} <small>trial {{ trial }}</small></h1>
<div class="sides">{% for arm in arms %}<div class="side" data-arm="{{ arm.name }}"><h2>{{ arm.name }} <span class="mode">{{ arm.class or ("pass" if arm.passed else "fail" if arm.passed is false else "n/a") }}</span></h2>
{% if arm.trajectory %}{{ timeline(arm.trajectory, arm.sha, "trajectory-" ~ loop.index) }}{% else %}<p class="meta">no trajectory recorded for this arm's run</p>{% endif %}</div>{% endfor %}</div>
{% endblock %}"""

FARM = """{% extends "base.html" %}{% block title %}Farm{% endblock %}{% block main %}
<h1>Farm <small id="farm-status">{% if not broker %}not configured{% else %}connecting…{% endif %}</small></h1>
{% if not broker %}<p class="warn">serve was started without <code>--broker redis://…</code>: there is no farm to show.</p>{% else %}
<section><h2>Runs</h2><table class="farm-runs"><thead><tr><th>run</th><th>spec</th><th>state</th><th>done / total</th><th>progress</th>
<th>rate /s</th><th>ETA</th><th>errors</th><th>judge backlog</th><th>spend $</th></tr></thead><tbody id="farm-runs"></tbody></table></section>
<div class="charts"><section><h2>Queues</h2><table><thead><tr><th>pool</th><th>queued</th><th>in workers' hands</th></tr></thead><tbody id="farm-queues"></tbody></table></section>
<section><h2>Workers <small>heartbeat keys ef:worker:&lt;name&gt;</small></h2><table><thead><tr><th>worker</th><th>host</th><th>queues</th><th>last heartbeat</th></tr></thead><tbody id="farm-workers"></tbody></table></section>
<section><h2>429 pauses in force</h2><table><thead><tr><th>endpoint</th><th>remaining</th></tr></thead><tbody id="farm-pauses"></tbody></table></section></div>
{% endif %}{% endblock %}"""

ERROR = """{% extends "base.html" %}{% block title %}{{ code }}{% endblock %}{% block main %}
<h1>{{ code }}</h1><p class="warn">{{ message }}</p><p><a href="/runs">back to the runs</a></p>{% endblock %}"""

TEMPLATES = {"base.html": BASE, "runs.html": RUNS, "run.html": RUN, "case.html": CASE, "diff.html": DIFF,
             "ab_list.html": AB_LIST, "ab.html": AB, "ab_side.html": AB_SIDE, "timeline.html": TIMELINE, "farm.html": FARM, "error.html": ERROR, "pager.html": PAGER}
