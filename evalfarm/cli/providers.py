"""CLI commands for providers: mock-provider, rubric, selftest."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from ..errors import EvalfarmError, SpecError, UsageError


@click.command("mock-provider")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8788, show_default=True)
@click.option("--latency-ms", type=click.FloatRange(0), default=0, show_default=True)
@click.option("--error-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Fraction of requests answered with a 5xx.")
@click.option("--rate-limit", type=click.FloatRange(0.001), help="Requests per second; above it: 429 + Retry-After.")
@click.option("--api-key", envvar="MOCK_PROVIDER_API_KEY", help="Require this bearer token (else 401).")
@click.option("--script", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="YAML list of {match: REGEX, reply: TEXT} rules tried before echoing.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for injected errors.")
@click.option("--agent-script", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="YAML tool-use script for coding agents (claude, codex, gemini, aider, opencode).")
@click.option("--quota-after", type=click.IntRange(0), metavar="N",
              help="After N answered completions, answer every request 429 insufficient_quota.")
@click.option("--batch-delay", type=click.FloatRange(0), default=0.0, show_default=True, metavar="SECONDS",
              help="Batch APIs: a batch is answered this long after its creation.")
@click.option("--batch-max-requests", type=click.IntRange(1), metavar="N",
              help="Batch APIs: a batch of more than N requests fails validation.")
def mock_provider(host: str, port: int, latency_ms: float, error_rate: float, rate_limit: float | None,
                  api_key: str | None, script: Path | None, seed: int, agent_script: Path | None,
                  quota_after: int | None, batch_delay: float, batch_max_requests: int | None) -> None:
    """A local OpenAI-compatible chat server: echo or scripted replies, usage, 429s, 5xx."""
    from ..mock.agents import AgentProtocols
    from ..mock.script import load_agent_script
    from ..mock.server import MockProvider, load_script, serve

    try:
        rules = load_script(script) if script else None
        agents = AgentProtocols(load_agent_script(agent_script)) if agent_script else None
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
    import socket

    with socket.socket() as probe:  # one clear line for a busy port, before aiohttp's traceback
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}); "
                             "pick another port") from None
    provider = MockProvider(latency_ms, error_rate, rate_limit, api_key, rules, seed, quota_after, batch_delay,
                            batch_max_requests)
    provider.agents = agents
    serve(host, port, provider)


def looks_like_a_path(value: str) -> bool:
    """``--spec`` takes a file or the text itself: one word with a separator or a file extension
    (``specs/new.md``, ``nosuchfile.txt``) is meant as a file, so a typo is an error, not a rubric
    about the file's name."""
    return not any(c.isspace() for c in value) and ("/" in value or re.search(r"\.[A-Za-z][A-Za-z0-9]{0,4}$", value) is not None)


@click.command()
@click.option("--spec", "spec_arg", required=True, metavar="FILE|TEXT",
              help="The specification of the new case: a file path or the text itself.")
@click.option("--id", "case_id", help="The case id (default: from the specification's first words).")
@click.option("--input", "case_input", help="The case input (default: the specification).")
@click.option("--tag", "tags", multiple=True)
@click.option("--model", envvar="EVAL_JUDGE_MODEL", required=True, help="The judge model that drafts the rubric.")
@click.option("--base-url", envvar="EVAL_BASE_URL", help="OpenAI-compatible endpoint (or EVAL_BASE_URL).")
@click.option("--api-key-env", default="EVAL_API_KEY", show_default=True,
              help="The NAME of the variable holding the key.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write the case YAML here.")
def rubric(spec_arg: str, case_id: str | None, case_input: str | None, tags: tuple[str, ...], model: str,
           base_url: str | None, api_key_env: str, output: Path | None) -> None:
    """Draft a weighted rubric for a new case with the judge model; writes case YAML."""
    import asyncio

    from ..runs.archive import atomic_write
    from ..engine.judges import JudgeError
    from ..engine.rubric import draft_case
    from ..providers.errors import ProviderError
    from ..providers.http import close_current
    from ..providers.openai import Endpoint, chat
    from ..redact import register_secret_env
    from ..spec.cases import dump_case

    path = Path(spec_arg)
    if len(spec_arg) < 4096 and (path.exists() or looks_like_a_path(spec_arg)):
        from ..spec.sourcemap import read_text

        try:
            text = read_text(path)  # a missing, unreadable, device or huge file: one line naming it
        except SpecError as exc:
            raise UsageError(f"--spec {spec_arg}: {exc.message}; give an existing file, or the specification's "
                             "text itself") from None
    else:
        text = spec_arg
    if not text.strip():
        raise UsageError("--spec: the specification is empty")
    if not base_url:
        raise UsageError("no endpoint: pass --base-url or set EVAL_BASE_URL")
    if output:
        from ..runs.archive import check_writable

        check_writable(Path(output), "--output")  # before the paid call, not after it
    register_secret_env(api_key_env)
    endpoint = Endpoint(base_url, model, api_key_env)
    try:
        async def draft() -> dict:
            try:
                return await draft_case(text, lambda m: chat(endpoint, m), case_id, case_input, list(tags))
            finally:
                await close_current()

        case = asyncio.run(draft())
    except (ProviderError, JudgeError) as exc:
        raise EvalfarmError(f"rubric: {type(exc).__name__}: {exc}") from None
    body = dump_case(case)
    if output:
        atomic_write(output, body.encode("utf-8"))
        click.echo(f"wrote {output} ({len(case['criteria'])} criteria, {len(case['checks'])} checks)", err=True)
    else:
        click.echo(body, nl=False)


@click.command()
def selftest() -> None:
    """Offline proof that the engine works: no sockets, no keys. Exit 0 or 1."""
    from ..selftest import main

    sys.exit(main(click.echo))
