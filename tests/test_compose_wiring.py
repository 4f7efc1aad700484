"""docker-compose.yml's wiring, run for real without a Docker engine (there is none here): the redis
service's own command line, its healthcheck, every worker service's own command and environment
(compose interpolation applied, the `redis` host mapped to 127.0.0.1), then the documented
`evalfarm run --broker redis://...localhost.../0 SPEC`. Only the container boundary is emulated."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis
import yaml

from conftest import EVALFARM, EXAMPLES, ROOT, env_for, free_port, run_cli, wait_for

POOLS_IN_COMPOSE = ("provider", "judge", "spawn", "aggregate")


def interpolate(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def start_compose(tmp_path, shell_env: dict[str, str]):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    port = free_port()
    redis = compose["services"]["redis"]
    cmd = [interpolate(a, shell_env) for a in redis["command"]]
    assert cmd[0] == "redis-server"
    binary = shutil.which("redis-server") or pytest.fail("redis-server is not installed")
    procs: list[subprocess.Popen] = []
    procs.append(subprocess.Popen([binary, *cmd[1:], "--port", str(port), "--bind", "127.0.0.1", "--dir",
                                   str(tmp_path), "--daemonize", "no"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert time.time() < deadline, "redis-server did not start"
            time.sleep(0.05)
    # the healthcheck, as the container runs it ($$ is compose's escape for $)
    test = redis["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    script = test[1].replace("$$", "$").replace("redis-cli", f"redis-cli -p {port}")
    health_env = {**os.environ, **{k: interpolate(v, shell_env) for k, v in redis["environment"].items()}}
    health = subprocess.run(["sh", "-c", script], env=health_env, capture_output=True, timeout=30)
    assert health.returncode == 0, health.stderr

    logs = {}
    for name in POOLS_IN_COMPOSE:
        svc = compose["services"][name]
        env = {k: interpolate(v, shell_env).replace("@redis:6379/", f"@127.0.0.1:{port}/")
               for k, v in svc["environment"].items()}
        env["EVALFARM_ARCHIVE"] = host_path(svc, env["EVALFARM_ARCHIVE"], tmp_path)
        logs[name] = tmp_path / f"{name}.log"
        procs.append(subprocess.Popen([*EVALFARM, *own_metrics_port(svc["command"]), "--loglevel", "INFO"],
                                      env=env_for(None, **env), stdout=open(logs[name], "wb"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.time() + 60
    for name, log in logs.items():
        while b"ready." not in log.read_bytes():
            assert time.time() < deadline, f"{name} not ready: {log.read_text()[-2000:]}"
            time.sleep(0.1)
    return port, procs, logs


def host_path(svc: dict, path: str, tmp_path) -> str:
    """A named volume's mount point in a service, as a directory of this host (one per volume, shared
    by every service that mounts it, as compose does)."""
    volumes = {v.split(":")[1]: v.split(":")[0] for v in svc.get("volumes", [])}
    assert path in volumes, f"{path} is not a volume of this service: {volumes}"
    host = tmp_path / "volumes" / volumes[path]
    host.mkdir(parents=True, exist_ok=True)
    return str(host)


def start_flower(tmp_path, port: int, shell_env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """The flower service's own command and environment (pip's Flower stands in for the image's)."""
    svc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["flower"]
    env = {k: interpolate(v, shell_env).replace("@redis:6379/", f"@127.0.0.1:{port}/")
           for k, v in svc["environment"].items()}
    web = free_port()
    cmd = [f"--port={web}" if a.startswith("--port=") else a for a in svc["command"]]
    assert cmd[:2] == ["celery", "flower"]
    proc = subprocess.Popen([sys.executable, "-m", *cmd, "--address=127.0.0.1"], env=env_for(None, **env),
                            stdout=open(tmp_path / "flower.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, web


def flower_api(web: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{web}{path}", timeout=10) as r:  # no credentials
        return json.loads(r.read())


def own_metrics_port(cmd: list[str]) -> list[str]:
    """Each container has its own network: on this one host every worker needs its own metrics port."""
    cmd = list(cmd)
    if "--metrics-port" in cmd:
        cmd[cmd.index("--metrics-port") + 1] = str(free_port())
    return cmd


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        return True
    except OSError:
        return False


def stop_all(procs: list[subprocess.Popen]) -> list[int | None]:
    codes = []
    for p in procs[1:]:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs[1:]:
        try:
            codes.append(p.wait(30))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            codes.append(None)
    procs[0].terminate()
    procs[0].wait(10)
    return codes


@pytest.mark.parametrize("password", [None, "pw-" + secrets.token_hex(8)], ids=["no-password", "REDIS_PASSWORD"])
def test_compose_services_run_the_documented_path(tmp_path, password):
    shell_env = {"REDIS_PASSWORD": password} if password else {}
    port, procs, logs = start_compose(tmp_path, shell_env)
    flower = None
    try:
        if importlib.util.find_spec("flower") is not None:
            flower, web = start_flower(tmp_path, port, shell_env)
            procs.append(flower)
            wait_for(lambda: _answers(f"http://127.0.0.1:{web}/healthcheck"), 30, "flower")
        auth = f":{password}@" if password else ""
        spec = EXAMPLES / "smoke.yaml"  # it has a judge block: the judge pool's queue is used as well
        coordinator = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["coordinator"]
        archive = host_path(coordinator, interpolate(coordinator["environment"]["EVALFARM_ARCHIVE"], shell_env),
                            tmp_path)
        res = run_cli("run", str(spec), "--broker", f"redis://{auth}localhost:{port}/0", "--no-save", "--json",
                      EVALFARM_ARCHIVE=archive)
        assert res.returncode == 0, res.stderr
        # the run went through the shared archive volume: its plan and the workers' outcomes are there
        run_id = json.loads(res.stdout)["run_id"]
        assert list((Path(archive) / run_id / "plan").glob("*.jsonl")), sorted(Path(archive).rglob("*"))
        assert list((Path(archive) / run_id / "out").glob("*.jsonl")), sorted(Path(archive).rglob("*"))
        if password:
            assert password not in res.stdout + res.stderr
            # and Redis really wants it
            with pytest.raises(redis.exceptions.AuthenticationError):
                redis.Redis(host="127.0.0.1", port=port).ping()
        seen = {name: log.read_text(errors="replace") for name, log in logs.items()}
        assert "evalfarm.run_batch" in seen["provider"] and "evalfarm.aggregate" in seen["aggregate"]
        assert "evalfarm.judge_batch" in seen["judge"]
        if flower is not None:  # compose's Flower answers its API and sees the db-0 pools and their tasks
            workers = wait_for(lambda: (w := flower_api(web, "/api/workers?refresh=1")) and
                               {n.split("-")[0] for n in w} >= {"provider", "judge", "aggregate"} and w, 30,
                               "flower to list the workers")
            tasks = wait_for(lambda: (t := flower_api(web, "/api/tasks")) and
                             {x["name"] for x in t.values() if x["state"] == "SUCCESS"} >=
                             {"evalfarm.run_batch", "evalfarm.aggregate"} and t, 30,
                             "flower to list the run's tasks")
            assert sorted(workers) and all(x["state"] == "SUCCESS" for x in tasks.values())
            # an archived run judges inside the batch that called the model (README: the run archive)
            assert "evalfarm.judge_batch" not in {x["name"] for x in tasks.values()}
    finally:
        codes = stop_all(procs)
    assert codes[:4] == [0, 0, 0, 0], {n: logs[n].read_text()[-1500:] for n in logs}
    if password:
        assert all(password not in log.read_text(errors="replace") for log in logs.values())
