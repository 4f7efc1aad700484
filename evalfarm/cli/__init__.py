"""The ``evalfarm`` command line: thin click commands, one module per command group.

Commands are imported only when they run (``evalfarm --help`` imports click and this
module, nothing else). Exit codes: 0 passed, 1 a threshold or gate failed, 2 bad usage or
input, 3 nothing was measured (every item errored), 4 an internal error (the traceback
with ``--debug``), 130 interrupted.
"""
from __future__ import annotations

import os
import sys

# evalfarm's models use no pydantic plug-in, and looking for plug-ins reads every installed package's
# metadata (~20 ms of each command); PYDANTIC_DISABLE_PLUGINS= (empty) in the environment loads them.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import click  # noqa: E402

from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, EvalfarmError

# name -> (module, attribute, one-line help shown by `evalfarm --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("evalfarm.cli.run", "run", "Run a SPEC (or --dataset cases) and apply its thresholds."),
    "list": ("evalfarm.cli.ci", "list_cmd", "Recorded runs, newest first (alias: ls)."),
    "diff": ("evalfarm.cli.ci", "diff", "Compare two runs: deltas, regressed/fixed cases, McNemar."),
    "gate": ("evalfarm.cli.ci", "gate", "Re-evaluate a stored run against thresholds and a baseline."),
    "baseline": ("evalfarm.cli.ci", "baseline", "Promote a stored run to a named baseline."),
    "worker": ("evalfarm.cli.farm", "worker", "Start a worker consuming one pool's queues."),
    "status": ("evalfarm.cli.farm", "status", "Where a farm run stands, or the recent runs."),
    "wait": ("evalfarm.cli.farm", "wait", "Attach to a farm run until its report exists."),
    "cancel": ("evalfarm.cli.farm", "cancel", "Stop a farm run; 'resume' continues it."),
    "resume": ("evalfarm.cli.farm", "resume", "Re-dispatch only a farm run's missing items."),
    "ab": ("evalfarm.cli.ab", "ab", "A/B: two prompt variants, or a suite under 2-3 profiles."),
    "audit": ("evalfarm.cli.ab", "audit", "The HMAC-chained audit log."),
    "rubric": ("evalfarm.cli.providers", "rubric", "Draft a weighted rubric for a new case."),
    "mock-provider": ("evalfarm.cli.providers", "mock_provider", "A local scripted OpenAI-compatible server."),
    "selftest": ("evalfarm.cli.providers", "selftest", "Offline proof that the engine works."),
    "serve": ("evalfarm.cli.serve", "serve", "The dashboard: runs, diffs, A/B, the live farm, /metrics."),
    "import": ("evalfarm.cli.interop", "import_cmd", "Import another tool's config (promptfoo) as a spec."),
    "export": ("evalfarm.cli.interop", "export_cmd", "Export a run: an Inspect AI log, JSONL or CSV rows."),
    "rescore": ("evalfarm.cli.overnight", "rescore", "Score a stored run's outputs again; only the judge is called."),
    "flaky": ("evalfarm.cli.overnight", "flaky", "Cases whose verdict flips across comparable runs."),
}
ALIASES = {"ls": "list"}
DEBUG = False


def fail(message: str, code: int) -> None:
    click.echo(f"evalfarm: error: {message}", err=True)
    sys.exit(code)


class EvalfarmGroup(click.Group):
    """Lazy commands; every error a user can cause becomes one line on stderr with the documented
    exit code, and anything unexpected one line with exit 4."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = COMMANDS.get(ALIASES.get(name, name))
        if entry is None:
            return None
        import importlib

        return getattr(importlib.import_module(entry[0]), entry[1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        aliases = {v: k for k, v in ALIASES.items()}
        rows = [(f"{n} ({aliases[n]})" if n in aliases else n, h) for n, (_, _, h) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(self, ctx, args):
        if args and args[0] in ALIASES:
            args = [ALIASES[args[0]], *args[1:]]
        if args and not args[0].startswith("-") and ALIASES.get(args[0], args[0]) not in COMMANDS:
            import difflib

            close = difflib.get_close_matches(args[0], [*COMMANDS, *ALIASES], n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise click.UsageError(f"no such command {args[0]!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EvalfarmError as exc:
            from ..redact import redact

            fail(redact(str(exc)), exc.exit_code)
        except OSError as exc:  # a path the user gave that cannot be written or read
            if isinstance(exc, BrokenPipeError):  # here, before click's own handler turns it into exit 1
                _quiet_broken_pipe()
            from ..redact import redact

            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{redact(exc.strerror or str(exc))}", EXIT_USAGE)

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            super().main(*args, **kwargs)
            return None  # as in click's standalone mode, a command's return value is not the exit code
        except click.UsageError as exc:
            hint = f" (see 'evalfarm {exc.ctx.command_path.split(' ', 1)[1]} --help')" \
                if exc.ctx is not None and " " in exc.ctx.command_path else " (see 'evalfarm --help')"
            fail(f"{exc.format_message()}{hint}", EXIT_USAGE)
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("evalfarm: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            _quiet_broken_pipe()
        except SystemExit:
            raise
        except RecursionError:
            fail("the input is nested too deeply to read; check the file you gave", EXIT_USAGE)
        except Exception as exc:  # the last resort: one line, exit 4; the traceback only with --debug
            if DEBUG or _debug():
                raise
            from ..redact import redact

            fail(f"internal error: {type(exc).__name__}: {redact(str(exc))[:300]} "
                 "(this is a bug in evalfarm; rerun with 'evalfarm --debug ...' for the traceback)", EXIT_INTERNAL)


def _debug() -> bool:
    import os

    return os.environ.get("EVALFARM_DEBUG", "") not in ("", "0")


def _quiet_broken_pipe() -> None:
    """Like other Unix tools: the reader went away (``| head``), so exit quietly."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    sys.exit(0)


@click.group(cls=EvalfarmGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalfarm", prog_name="evalfarm", message="%(prog)s %(version)s")
@click.option("--log-level", default="WARNING", envvar="EVALFARM_LOG_LEVEL", show_default=True)
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error.")
def main(log_level: str, debug: bool) -> None:
    """evalfarm: a distributed eval farm for LLM prompts, models and coding agents."""
    global DEBUG
    DEBUG = debug
    from ..engine.registry import load_plugins
    from ..logs import configure

    configure(log_level)
    try:
        load_plugins()
    except ImportError as exc:
        raise EvalfarmError(f"EVALFARM_PLUGINS: cannot import {exc.name!r}: {exc}") from None


def entry() -> None:
    """The process's entry point (the ``evalfarm`` script, ``python -m evalfarm.cli``): the command,
    then an exit without the interpreter's teardown. Freeing every module and object one by one took
    0.1-0.4 s after the last line of a run (more than a one-item run's work) and has no effect a user
    can see; the atexit handlers still run and the output is flushed. Callers that embed the CLI
    (click's CliRunner, the tests' fork) call ``main`` and keep the normal exit."""
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    leave(code)


def leave(code: object) -> None:
    """``sys.exit(code)``, minus the teardown: unless a non-daemon thread still runs (the normal exit
    waits for it) or the output cannot be flushed (a closed pipe: the normal exit says nothing)."""
    import atexit
    import threading

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    main_thread = threading.main_thread()
    if any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()  # what Python runs at exit (logging's flush, our pools' close), then no teardown
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - e.g. the reader of a pipe went away: the normal exit handles it
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
