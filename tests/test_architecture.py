"""The layout is the architecture: arrows between packages point down only (the table below is the
picture in the README's layout section), only ``runs/`` reaches the executors, no import cycle, and the
core (spec, core, engine) reaches nothing of the farm (executors, Celery, kombu, Redis). Checked on the
real import graph (function-level imports counted), statically and at run time."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, env_for

PKG = ROOT / "evalfarm"
CORE = ("evalfarm.spec", "evalfarm.core", "evalfarm.engine", "evalfarm.stats")
BASE = "base"  # the top-level modules every package may use: errors, names, redact, perms, canonical, envvars, logs
# Which packages each package may import, besides itself and the base modules: a layer sees only what is
# below it. Top to bottom: the command line; the tools that read runs (the dashboard, interop, the
# selftest); the A/B harness; CI on stored runs; runs/ (a run's life, the only caller of the executors);
# the executors; agents and providers (what an item calls); the engine; core and stats; the spec.
ALLOWED: dict[str, set[str]] = {
    "cli": {"dashboard", "interop", "selftest", "ab", "ci", "runs", "agents", "providers", "mock", "engine", "core",
            "stats", "spec"},
    "dashboard": {"ab", "ci", "runs", "core", "stats", "spec"},
    "interop": {"runs", "engine", "core", "spec"},
    "selftest": {"ci", "runs", "providers", "engine", "core", "spec"},
    "ab": {"runs", "agents", "engine", "core", "stats", "spec"},
    "ci": {"runs", "engine", "core", "stats", "spec"},
    "runs": {"executors", "agents", "providers", "engine", "core", "spec"},
    "executors": {"agents", "providers", "engine", "core", "spec"},
    "agents": {"providers", "engine", "core", "spec"},
    "providers": {"engine", "core", "spec"},
    "mock": set(),
    "engine": {"core", "spec"},
    "stats": set(),
    "core": {"spec"},
    "spec": set(),
    BASE: set(),
}
FARM = ("evalfarm.executors", "celery", "kombu", "redis")


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if p.name == "__init__.py" else parts)] = p
    return out


def module_level_imports(name: str, path: Path, known: set[str], everywhere: bool = False) -> set[str]:
    """What a module imports when it is imported (function-level imports run later, if ever); with
    ``everywhere``, the imports inside functions too (the lazy ones)."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in (ast.walk(tree) if everywhere else tree.body):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        found |= {t for t in targets if t in known and t != name}
    return found


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(u: str, path: list[str]) -> list[str] | None:
        state[u] = 1
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if v not in state and (cycle := visit(v, path + [v])):
                return cycle
        state[u] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m, [m])):
            return cycle
    return None


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PKG / parts[1]).is_dir() else BASE


def package_arrows() -> dict[tuple[str, str], list[str]]:
    """(from package, to package) -> the module imports that draw that arrow, lazy ones included."""
    mods = modules()
    arrows: dict[tuple[str, str], list[str]] = {}
    for m, p in mods.items():
        for d in module_level_imports(m, p, set(mods), everywhere=True):
            a, b = package_of(m), package_of(d)
            if a != b:
                arrows.setdefault((a, b), []).append(f"{m} -> {d}")
    return arrows


def test_every_package_is_in_the_table():
    packages = {package_of(m) for m in modules()}
    assert packages == set(ALLOWED), packages ^ set(ALLOWED)


def test_arrows_point_down_only():
    """Every import between packages (function-level ones too) is one the table allows: nothing below
    reaches up (loading a spec runs no git, the core knows no farm, CI prints nothing of the CLI's)."""
    arrows = package_arrows()
    wrong = {f"{a} -> {b}": sorted(set(v))[:3] for (a, b), v in arrows.items() if b != BASE and b not in ALLOWED[a]}
    assert not wrong, wrong
    assert len(arrows) > 20  # the check ran over the real package


def test_only_runs_reaches_the_executors():
    """httpx lets the client alone choose the transport; here ``runs/`` alone chooses the executor."""
    callers = {a for (a, b) in package_arrows() if b == "executors"}
    assert callers == {"runs"}, callers


def test_the_table_is_a_layering():
    """The allowed arrows themselves have no cycle: the table is a picture of floors."""
    graph = {k: set(v) for k, v in ALLOWED.items()}
    assert cycle_in(graph) is None


def test_no_import_cycle():
    mods = modules()
    cycle = cycle_in({m: module_level_imports(m, p, set(mods)) for m, p in mods.items()})
    assert cycle is None, " -> ".join(cycle)


def test_no_cycle_closed_by_a_lazy_import():
    """Function-level imports are for start-up time (``--help`` imports click only), never to close
    a cycle: with them counted the graph has no cycle either (a package importing its own
    submodules is Python's package initialisation, not a cycle, and is left out)."""
    mods = modules()
    graph = {m: {d for d in module_level_imports(m, p, set(mods), everywhere=True)
                 if not m.startswith(d + ".")} for m, p in mods.items()}
    cycle = cycle_in(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_core_imports_nothing_of_the_farm():
    """Import every module of spec/, core/ and engine/ in a fresh interpreter: no Celery, kombu, Redis
    or backend module may be loaded as a consequence."""
    core = sorted(m for m in modules() if m.startswith(CORE))
    code = (f"import importlib, json, sys\nfor m in {core!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    res = subprocess.run([sys.executable, "-c", code], env=env_for(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    loaded = json.loads(res.stdout)
    leaks = [m for m in loaded if m.startswith(FARM)]
    assert not leaks, leaks
    assert len(core) > 20  # the check ran over the real package


def test_no_emulation_of_a_worker():
    """Celery's eager mode is not a backend: the in-process backend runs the engine itself."""
    hits = [str(p) for p in PKG.rglob("*.py") if "task_always_eager" in p.read_text()]
    assert hits == []


def test_help_imports_only_click():
    code = "import sys\nfrom evalfarm.cli import main\nprint(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('pydantic', 'httpx', 'aiohttp', 'celery', 'yaml', 'rich', 'structlog', 'redis')))"
    res = subprocess.run([sys.executable, "-c", code], env=env_for(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "[]", (res.stdout, res.stderr)


def test_help_lists_every_command_and_the_ls_alias():
    """A new user reads `evalfarm --help` to find commands: the alias `ls` is there, beside `list`."""
    from evalfarm.cli import COMMANDS
    res = subprocess.run([sys.executable, "-m", "evalfarm.cli", "--help"], env=env_for(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    listed = {line.split()[0] for line in res.stdout.split("Commands:")[1].splitlines() if line.strip()}
    assert listed == set(COMMANDS) and "list (ls)" in res.stdout, res.stdout


def installed_plugin(tmp_path: Path, name: str, entry: str, source: str) -> dict[str, str]:
    """A distribution ``<name>_plugin`` with one evalfarm.adapters entry point, as pip would leave it
    in site-packages; returns an environment that finds it."""
    site = tmp_path / "site"
    info = site / f"{name}_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[evalfarm.adapters]\n{name} = {name}_plugin:{entry}\n")
    (site / f"{name}_plugin.py").write_text(source)
    env = env_for()
    env["PYTHONPATH"] = f"{site}{':' + env['PYTHONPATH'] if env.get('PYTHONPATH') else ''}"
    return env


def test_a_plugin_found_by_entry_point(tmp_path):
    """A plug-in installed the ecosystem's way (a distribution with an evalfarm.adapters entry point) is
    used by name, with no EVALFARM_PLUGINS setting."""
    env = installed_plugin(tmp_path, "shout", "Shout",
                           "from evalfarm import Completion\n\n"
                           "class Shout:\n"
                           "    def __init__(self, entry):\n        self.id = entry\n"
                           "    def config(self):\n        return {'kind': 'shout'}\n"
                           "    async def complete(self, prompt, trial):\n"
                           "        return Completion(text=prompt.text.upper())\n")
    (tmp_path / "s.yaml").write_text("name: ep\nadapters: ['shout:loud']\nprompts:\n"
                                     "  - {id: a, text: hello, expected_output_contains: [HELLO]}\n")
    res = subprocess.run([sys.executable, "-m", "evalfarm.cli", "run", str(tmp_path / "s.yaml"), "--no-save",
                          "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["outcomes"][0]["output"] == "HELLO"
    unknown = subprocess.run([sys.executable, "-m", "evalfarm.cli", "run", str(tmp_path / "s.yaml"), "--no-save"],
                             env=env_for(), capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown adapter 'shout'" in unknown.stderr, unknown.stderr


def test_a_broken_plugin_is_named_in_one_line(tmp_path):
    """A plug-in that fails to import (by entry point or EVALFARM_PLUGINS) is the plug-in's fault: one
    line naming it and the spec's line, exit 2; never 'internal error ... a bug in evalfarm' (exit 4)."""
    env = installed_plugin(tmp_path, "broken", "Broken", "raise RuntimeError('needs BROKEN_HOME')\n")
    (tmp_path / "s.yaml").write_text("name: ep\nadapters: ['broken:x']\nprompts:\n  - {id: a, text: hello}\n")
    by_entry_point = subprocess.run([sys.executable, "-m", "evalfarm.cli", "run", str(tmp_path / "s.yaml"),
                                     "--no-save"], env=env, capture_output=True, text=True, timeout=60)
    assert by_entry_point.returncode == 2, by_entry_point.stderr
    assert by_entry_point.stderr.strip().splitlines()[-1] == (
        f"evalfarm: error: {tmp_path / 's.yaml'}:2: adapters[0]: adapter 'broken': its plug-in "
        "(broken_plugin:Broken) failed to load: RuntimeError: needs BROKEN_HOME")
    env["EVALFARM_PLUGINS"] = "broken_plugin"
    by_setting = subprocess.run([sys.executable, "-m", "evalfarm.cli", "run", str(tmp_path / "s.yaml"),
                                 "--no-save"], env=env, capture_output=True, text=True, timeout=60)
    assert by_setting.returncode == 2 and by_setting.stderr.strip().splitlines()[-1] == (
        "evalfarm: error: EVALFARM_PLUGINS: cannot import 'broken_plugin': RuntimeError: needs BROKEN_HOME")
