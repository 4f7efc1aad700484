"""``evalfarm serve``: the dashboard server (one line in the COMMANDS table of evalfarm/cli/__init__.py)."""
from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import click

from ..dashboard.farm import check_broker
from ..dashboard.state import check_state_dir
from ..errors import UsageError
from ..redact import redact

MIN_TOKEN = 16


@click.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".evalfarm"),
              show_default=True, envvar="EVALFARM_STATE_DIR", help="The state dir to show (runs, registry, A/B).")
@click.option("--broker", envvar="EVALFARM_BROKER_URL", metavar="URL",
              help="The farm's Redis (redis://...): adds the live Farm page and farm figures to /metrics.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True, help="0 picks a free port.")
@click.option("--token", envvar="EVALFARM_SERVE_TOKEN", metavar="TOKEN",
              help="Require this token on every request (Authorization: Bearer TOKEN, or ?token=TOKEN once "
                   "in a browser); or EVALFARM_SERVE_TOKEN.")
def serve(state_dir: Path, broker: str | None, host: str, port: int, token: str | None) -> None:
    """Serve the dashboard: runs, run details, diffs, A/B artifacts and the live farm; a JSON API
    under /api/ and Prometheus metrics on /metrics. Read-only."""
    from ..dashboard.app import create_app, is_loopback

    check_state_dir(state_dir)
    broker = check_broker(broker or None)
    token = token or None
    if token is not None and len(token) < MIN_TOKEN:
        raise UsageError(f"--token: at least {MIN_TOKEN} characters (e.g. python3 -c 'import secrets; "
                         "print(secrets.token_urlsafe(24))')")
    if not is_loopback(host) and token is None:
        raise UsageError(f"--host {host} is not loopback: anyone who can reach it could read every report; "
                         "pass --token TOKEN or set EVALFARM_SERVE_TOKEN")
    app = create_app(state_dir, broker, token)
    asyncio.run(_serve(app, host, port, state_dir, broker, token is not None))


async def _serve(app, host: str, port: int, state_dir: Path, broker: str | None, has_token: bool) -> None:
    from aiohttp import web

    from ..dashboard.app import is_loopback

    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise UsageError(f"--host {host} --port {port}: cannot listen ({exc.strerror or exc})") from None
    bound = [s.getsockname() for s in (site._server.sockets if site._server else [])]  # noqa: SLF001
    actual = bound[0][1] if bound else port
    shown = f"[{host}]" if ":" in host else host
    scope = "loopback only" if is_loopback(host) else "reachable from the network"
    click.echo(f"evalfarm serve: http://{shown}:{actual}/ (bound to {host}, {scope}; "
               f"{'token required' if has_token else 'no token'}; read-only over {state_dir}"
               f"{'; farm ' + redact(broker) if broker else ''})", err=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
