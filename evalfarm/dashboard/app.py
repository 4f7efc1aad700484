"""The aiohttp application: pages, the JSON API under /api/, /metrics, and the guards.

Guards, in order, on every request: only GET and HEAD (no endpoint writes); the token when
one is set (``Authorization: Bearer``, the ``evalfarm_token`` cookie, or ``?token=`` once,
which sets the cookie); without a token, only loopback ``Host`` headers (a page on another
site cannot reach this server through DNS rebinding). Every response carries a strict CSP
(scripts from /static/ only) and a ``Server-Timing`` header with the server time.

Data calls are blocking (files, SQLite, Redis), so they run in threads: one slow view never
stalls the event loop that serves the others.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from jinja2 import DictLoader, Environment, select_autoescape

from . import assets, safe, svg
from .reports import ReportError
from .safe import BadRef
from .state import State
from .views import PASS_RATE_FIELDS, THRESHOLD_OF
from ..redact import redact

log = logging.getLogger("evalfarm.serve")
STATE = web.AppKey("state", State)
SETTINGS = web.AppKey("settings", dict)
COOKIE = "evalfarm_token"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def same_origin(raw_path: str) -> str:
    """A Location for this server only: one leading slash (``//host/x`` and ``/\\host/x`` are other
    sites to a browser), and every character outside a path's own set percent-encoded (browsers drop
    tabs and newlines from URLs, so ``/\t/host`` would turn into ``//host`` too)."""
    from urllib.parse import quote

    path = quote(raw_path, safe="/%:@!$&'()*+,;=-._~")
    return "/" + path.lstrip("/\\")


# --- formatting filters --------------------------------------------------------------------------------

def _pct(v: Any) -> str:
    return "n/a" if not isinstance(v, (int, float)) or isinstance(v, bool) else f"{v * 100:.1f}%"


def _num(v: Any) -> str:
    return svg.fmt_num(v if isinstance(v, (int, float)) and not isinstance(v, bool) else None, 4)


def _usd(v: Any) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "n/a"
    return f"{v:.6f}" if v < 100 else f"{v:,.2f}"


def _dur(v: Any) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "n/a"
    if v < 60:
        return f"{v:.1f} s"
    m, s = divmod(int(v), 60)
    return f"{m} min {s} s" if m < 60 else f"{m // 60} h {m % 60} min"


def _ts(v: Any) -> str:
    return v[:19].replace("T", " ") if isinstance(v, str) else ""


def _signed(v: Any) -> str:
    return "n/a" if not isinstance(v, (int, float)) or isinstance(v, bool) else f"{v:+.4f}"


def _pval(v: Any) -> str:
    return "n/a" if not isinstance(v, (int, float)) else f"{v:.4g}"


def _qs(args: dict[str, Any], **override: Any) -> str:
    merged = {k: v for k, v in {**args, **override}.items() if v not in (None, "")}
    return urlencode(merged)


def make_env() -> Environment:
    env = Environment(loader=DictLoader(__import__("evalfarm.dashboard.templates", fromlist=["TEMPLATES"]).TEMPLATES),
                      autoescape=select_autoescape(default=True, default_for_string=True), auto_reload=False)
    env.filters.update(pct=_pct, num=_num, usd=_usd, dur=_dur, ts=_ts, signed=_signed, pval=_pval, qs=_qs)
    env.globals.update(score_bar=svg.score_bar)
    return env


# --- helpers -------------------------------------------------------------------------------------------

def _int(value: str | None, default: int, lo: int = 1, hi: int = 1_000_000) -> int:
    try:
        return max(lo, min(hi, int(value))) if value not in (None, "") else default
    except ValueError:
        raise BadRef(f"not a whole number: {value[:40]!r}") from None


async def _call(fn, *args, **kwargs):
    return await asyncio.to_thread(fn, *args, **kwargs)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, ensure_ascii=False, allow_nan=False, default=str),
                        status=status, content_type="application/json")


def _render(request: web.Request, name: str, status: int = 200, **ctx: Any) -> web.Response:
    settings = request.app[SETTINGS]
    html = settings["env"].get_template(name).render(state_dir=settings["state_dir_label"],
                                                     broker=settings["broker_label"], **ctx)
    return web.Response(text=html, status=status, content_type="text/html")


# --- middlewares ---------------------------------------------------------------------------------------

@web.middleware
async def guard(request: web.Request, handler):
    started = time.perf_counter()
    settings = request.app[SETTINGS]
    if request.method not in ("GET", "HEAD"):
        return _finish(web.Response(status=405, text="evalfarm serve is read-only: GET and HEAD only\n",
                                    headers={"Allow": "GET, HEAD"}), started)
    token = settings["token"]
    if token is None:
        host = (request.host or "").rsplit(":", 1)[0] if not (request.host or "").startswith("[") \
            else (request.host or "").split("]")[0] + "]"
        if host.lower() not in LOOPBACK_NAMES:
            return _finish(web.Response(status=421, text="evalfarm serve answers loopback host names only "
                                        "(start it with --host and --token to serve others)\n"), started)
    else:
        given = _token_of(request)
        if given is None or not hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
            return _finish(web.Response(status=401, text="evalfarm serve: a token is required "
                                        "(Authorization: Bearer TOKEN, or ?token=TOKEN once)\n",
                                        headers={"WWW-Authenticate": 'Bearer realm="evalfarm"'}), started)
        if "token" in request.query and request.method == "GET":
            rest = {k: v for k, v in request.query.items() if k != "token"}
            resp = web.Response(status=303, headers={"Location": same_origin(request.rel_url.raw_path)
                                                     + ("?" + urlencode(rest) if rest else "")})
            resp.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
            return _finish(resp, started)
    try:
        resp = await handler(request)
    except BadRef as exc:
        resp = _error(request, exc.status, str(exc))
    except ReportError as exc:
        resp = _error(request, 422, f"this report cannot be shown: {exc}")
    except web.HTTPException as exc:
        if exc.status >= 400 and request.path.startswith("/api/"):
            resp = _json({"error": exc.reason}, exc.status)
        elif exc.status == 404:
            resp = _error(request, 404, "no such page")
        else:
            raise
    except Exception as exc:  # noqa: BLE001 - one bad view must not take the server down
        log.exception("view failed: %s", request.path)
        resp = _error(request, 500, f"internal error: {type(exc).__name__}: {redact(str(exc))[:300]}")
    return _finish(resp, started)


def _token_of(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if COOKIE in request.cookies:
        return request.cookies[COOKIE]
    return request.query.get("token")


def _error(request: web.Request, status: int, message: str) -> web.Response:
    if request.path.startswith("/api/") or request.path == "/metrics":
        return _json({"error": message}, status)
    return _render(request, "error.html", status=status, code=status, message=message, page="error", nav="")


def _finish(resp: web.StreamResponse, started: float) -> web.StreamResponse:
    if not resp.prepared:
        h = resp.headers
        h.setdefault("Content-Security-Policy", CSP)
        h.setdefault("X-Content-Type-Options", "nosniff")
        h.setdefault("Referrer-Policy", "no-referrer")
        h.setdefault("X-Frame-Options", "DENY")
        h.setdefault("Cache-Control", "no-store")
        h["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
    return resp


# --- pages ---------------------------------------------------------------------------------------------

def _run_args(request: web.Request) -> dict[str, Any]:
    q = request.query
    return {k: q.get(k, "") for k in ("spec", "tag", "adapter", "verdict")}


async def runs_page(request: web.Request) -> web.Response:
    args = _run_args(request)
    data = await _call(request.app[STATE].runs.list, **{k: v or None for k, v in args.items()},
                       page=_int(request.query.get("page"), 1), per_page=_int(request.query.get("per_page"), 100))
    return _render(request, "runs.html", data=data, args=args, page="runs", nav="Runs")


async def run_page(request: web.Request) -> web.Response:
    rid = request.match_info["run_id"]
    state = request.app[STATE]
    q = request.query
    case_args = {"filter": q.get("filter", "all"), "adapter": q.get("adapter", "")}

    def build():
        run = state.runs.run(rid)
        cases = state.runs.cases(rid, case_args["filter"], case_args["adapter"] or None, _int(q.get("page"), 1))
        return run, cases

    run, cases = await _call(build)
    taxonomy = svg.bar_chart([(x["mode"], x["count"]) for x in run["failure_taxonomy"]], "failure-taxonomy")
    hist = run["latency_histogram"]
    latency = svg.histogram(hist["edges"], hist["counts"], "latency")
    cost = svg.bar_chart([("model", run["cost"]["model_usd"]), ("judge", run["cost"]["judge_usd"])], "cost",
                         value_fmt=lambda v: f"${v:.6f}")
    return _render(request, "run.html", run=run, cases=cases, case_args=case_args, taxonomy_svg=taxonomy,
                   latency_svg=latency, cost_svg=cost, score_fields=PASS_RATE_FIELDS, threshold_of=THRESHOLD_OF,
                   mode_counts={x["mode"]: x["count"] for x in run["failure_taxonomy"]} | run["statuses"],
                   page="run", nav="Runs")


async def case_output(request: web.Request) -> web.StreamResponse:
    """A case's whole output as a text download, streamed from the report (never held whole)."""
    rid = request.match_info["run_id"]
    index = _int(request.match_info["index"], 0, lo=0, hi=10 ** 9)
    pieces = await _call(request.app[STATE].runs.output, rid, index)
    resp = web.StreamResponse(headers={
        "Content-Type": "text/plain; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{rid}-case-{index}-output.txt"'})
    _finish(resp, time.perf_counter())
    await resp.prepare(request)
    try:
        while True:
            piece = await _call(next, pieces, None)
            if piece is None:
                break
            await resp.write(piece.encode("utf-8", "replace"))
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            await _call(close)
    await resp.write_eof()
    return resp


async def case_page(request: web.Request) -> web.Response:
    rid = request.match_info["run_id"]
    index = _int(request.match_info["index"], 0, lo=0, hi=10 ** 9)
    c = await _call(request.app[STATE].case, rid, index)
    return _render(request, "case.html", c=c, page="case", nav="Runs")


async def diff_page(request: web.Request) -> web.Response:
    state = request.app[STATE]
    args = {"a": request.query.get("a", ""), "b": request.query.get("b", "")}
    d, error = None, None
    if args["a"] and args["b"]:
        try:
            d = await _call(state.runs.diff, args["a"], args["b"])
        except BadRef as exc:
            error = str(exc)
    elif args["a"] or args["b"]:
        error = "give two runs: a (before) and b (after); a run id or baseline:NAME"
    refs = await _call(state.refs)
    return _render(request, "diff.html", d=d, error=error, args=args, refs=refs, page="diff", nav="Diff")


async def ab_list_page(request: web.Request) -> web.Response:
    state = request.app[STATE]
    rows, audit = await asyncio.gather(_call(state.ab.artifacts), _call(state.ab.audit_status))
    return _render(request, "ab_list.html", rows=rows, audit=audit, page="ab", nav="A/B")


_DELTA_FMT = {"pass_rate": lambda v: f"{v:+.3f}", "median_usd": lambda v: f"{v:+.6f} $",
              "median_tokens": lambda v: f"{v:+.1f}", "median_output_tokens": lambda v: f"{v:+.1f}"}


async def ab_page(request: web.Request) -> web.Response:
    state = request.app[STATE]
    sha = request.match_info["sha"]
    a = await _call(state.ab.artifact, sha)
    v = await _call(state.ab.verify, sha)
    names: list[str] = []
    for c in a["comparisons"]:
        names += [n for n in c["deltas"] if n not in names]
    charts = []
    for n in names:
        rows = []
        for c in a["comparisons"]:
            d = c["deltas"].get(n)
            label = f"{c['label']}: {c['b']} − {c['a']}"
            rows.append((label, d.get("delta") if d and d["measured"] else None,
                         d.get("lo") if d else None, d.get("hi") if d else None))
        charts.append((n, svg.intervals(rows, f"delta-{n}", value_fmt=_DELTA_FMT.get(n))))
    q = a.get("sequential")
    seq_chart = svg.sequence(q["history"], q["decision_round"] or (q["rounds"] or None), q["margin"]) if q else None
    tasks = await _call(state.ab.tasks, sha)
    return _render(request, "ab.html", a=a, v=v, interval_charts=charts, seq_chart=seq_chart, page="ab-detail",
                   nav="A/B", tasks=tasks)


async def ab_side_page(request: web.Request) -> web.Response:
    """One task's trajectories, one column per arm (the A/B page links here from each task)."""
    state = request.app[STATE]
    sha = request.match_info["sha"]
    a = await _call(state.ab.artifact, sha)
    task, trial = request.query.get("task", ""), request.query.get("trial", "0")
    tasks = await _call(state.ab.tasks, sha)
    entry = next((t for t in tasks if t["task"] == task and str(t["trial"]) == trial), None)
    if entry is None:
        raise BadRef(f"no task {safe.text(task, 80)!r} trial {safe.text(trial, 10)} in this A/B artifact", 404)
    arms = []
    for r in a["arms"]:
        x = entry["arms"].get(r["name"]) or {}
        t = await _call(state.trajectory, x["trajectory"]) if x.get("trajectory") else None
        arms.append({"name": r["name"], "passed": x.get("passed"), "class": x.get("class"),
                     "sha": x.get("trajectory"), "trajectory": t})
    return _render(request, "ab_side.html", sha=sha, task=entry["task"], trial=entry["trial"], arms=arms,
                   page="ab-side", nav="A/B")


async def farm_page(request: web.Request) -> web.Response:
    return _render(request, "farm.html", page="farm", nav="Farm")


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    files = {"app.css": (assets.CSS, "text/css"), "app.js": (assets.JS, "application/javascript")}
    if name not in files:
        raise web.HTTPNotFound()
    body, ctype = files[name]
    return web.Response(text=body, content_type=ctype, headers={"Cache-Control": "max-age=300"})


# --- the JSON API --------------------------------------------------------------------------------------

async def api_runs(request: web.Request) -> web.Response:
    args = _run_args(request)
    return _json(await _call(request.app[STATE].runs.list, **{k: v or None for k, v in args.items()},
                             page=_int(request.query.get("page"), 1), per_page=_int(request.query.get("per_page"), 100)))


async def api_run(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].runs.run, request.match_info["run_id"]))


async def api_cases(request: web.Request) -> web.Response:
    q = request.query
    return _json(await _call(request.app[STATE].runs.cases, request.match_info["run_id"], q.get("filter", "all"),
                             q.get("adapter") or None, _int(q.get("page"), 1), _int(q.get("per_page"), 50)))


async def api_case(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].case, request.match_info["run_id"],
                             _int(request.match_info["index"], 0, lo=0, hi=10 ** 9)))


async def api_diff(request: web.Request) -> web.Response:
    q = request.query
    if not q.get("a") or not q.get("b"):
        raise BadRef("give a and b: run ids or baseline:NAME")
    try:
        alpha = float(q.get("alpha", "0.05"))
    except ValueError:
        raise BadRef("alpha must be a number between 0 and 1") from None
    if not 0 < alpha < 1:
        raise BadRef("alpha must be a number between 0 and 1")
    return _json(await _call(request.app[STATE].runs.diff, q["a"], q["b"], alpha, _int(q.get("limit"), 200, hi=100000)))


async def api_baselines(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].registry.baselines))


async def api_ab_list(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].ab.artifacts))


async def api_ab(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].ab.artifact, request.match_info["sha"]))


async def api_ab_verify(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].ab.verify, request.match_info["sha"]))


async def api_audit(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].ab.audit_status))


async def api_farm(request: web.Request) -> web.Response:
    return _json(await _call(request.app[STATE].farm.snapshot))


async def api_farm_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: one farm snapshot per interval, for at most ``sse_max_s`` (the browser's
    EventSource reconnects by itself)."""
    settings = request.app[SETTINGS]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                       "X-Accel-Buffering": "no"})
    _finish(resp, time.perf_counter())
    await resp.prepare(request)
    deadline = time.monotonic() + settings["sse_max_s"]
    try:
        while time.monotonic() < deadline:
            snap = await _call(request.app[STATE].farm.snapshot)
            await resp.write(b"data: " + json.dumps(snap, default=str).encode() + b"\n\n")
            await asyncio.sleep(settings["sse_interval_s"])
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return resp


async def metrics(request: web.Request) -> web.Response:
    from .serve_metrics import exposition

    body, ctype = await _call(exposition, request.app[STATE])
    return web.Response(body=body, headers={"Content-Type": ctype})


def create_app(state_dir: Path | str, broker: str | None = None, token: str | None = None,
               sse_interval_s: float = 1.0, sse_max_s: float = 600.0) -> web.Application:
    app = web.Application(middlewares=[guard])
    app[STATE] = State(state_dir, broker)
    app[SETTINGS] = {"token": token, "env": make_env(), "state_dir_label": str(state_dir),
                     "broker_label": redact(broker) if broker else None, "sse_interval_s": sse_interval_s,
                     "sse_max_s": sse_max_s}

    async def root(request: web.Request):
        raise web.HTTPFound("/runs")

    app.router.add_get("/", root)
    app.router.add_get("/runs", runs_page)
    app.router.add_get("/runs/{run_id}", run_page)
    app.router.add_get("/runs/{run_id}/cases/{index}", case_page)
    app.router.add_get("/runs/{run_id}/cases/{index}/output", case_output)
    app.router.add_get("/diff", diff_page)
    app.router.add_get("/ab", ab_list_page)
    app.router.add_get("/ab/{sha}", ab_page)
    app.router.add_get("/ab/{sha}/side", ab_side_page)
    app.router.add_get("/farm", farm_page)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/runs", api_runs)
    app.router.add_get("/api/runs/{run_id}", api_run)
    app.router.add_get("/api/runs/{run_id}/cases", api_cases)
    app.router.add_get("/api/runs/{run_id}/cases/{index}", api_case)
    app.router.add_get("/api/diff", api_diff)
    app.router.add_get("/api/baselines", api_baselines)
    app.router.add_get("/api/ab", api_ab_list)
    app.router.add_get("/api/ab/{sha}", api_ab)
    app.router.add_get("/api/ab/{sha}/verify", api_ab_verify)
    app.router.add_get("/api/audit", api_audit)
    app.router.add_get("/api/farm", api_farm)
    app.router.add_get("/api/farm/stream", api_farm_stream)
    return app
