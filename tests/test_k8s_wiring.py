"""deploy/'s wiring, run for real without a cluster: Redis started with the StatefulSet's own args
($(VAR) expanded from the Secret as the kubelet does), its probe, each Deployment's args with its
env resolved from the Secret and the ConfigMap (the Service's host mapped to 127.0.0.1), and the
KEDA triggers' view: the backlog of a pool with no worker sits in exactly the Redis list and
database its ScaledObject watches, so KEDA would scale that pool up."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest
import redis
import yaml

from conftest import EVALFARM, EXAMPLES, ROOT, env_for, free_port

DEPLOY = ROOT / "deploy"


def load() -> list[dict]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return [d for name in kustomization["resources"] for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def resolve_env(container: dict, objects: dict[tuple[str, str], dict]) -> dict[str, str]:
    env: dict[str, str] = {}
    for src in container.get("envFrom", []):
        env.update(objects[("ConfigMap", src["configMapRef"]["name"])]["data"])
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        else:
            ref = e["valueFrom"].get("secretKeyRef") or e["valueFrom"]["configMapKeyRef"]
            kind = "Secret" if "secretKeyRef" in e["valueFrom"] else "ConfigMap"
            obj = objects[(kind, ref["name"])]
            env[e["name"]] = (obj.get("stringData") or obj.get("data"))[ref["key"]]
    return env


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion in args and env values."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def wait_port(port: int) -> None:
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert time.time() < deadline, "redis-server did not start"
            time.sleep(0.05)


def test_k8s_manifests_wire_redis_workers_and_keda_triggers(tmp_path):
    docs = load()
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    service = objects[("Service", "evalfarm-redis")]
    svc_host = f"@{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/"
    port = free_port()

    redis_container = objects[("StatefulSet", "evalfarm-redis")]["spec"]["template"]["spec"]["containers"][0]
    renv = resolve_env(redis_container, objects)
    args = [expand(a, renv) for a in redis_container["args"]]
    password = objects[("Secret", "evalfarm-redis")]["stringData"]["password"]
    assert args[args.index("--requirepass") + 1] == password
    binary = shutil.which("redis-server") or pytest.fail("redis-server is not installed")
    procs = [subprocess.Popen([binary, *args, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                               "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    workers: dict[str, subprocess.Popen] = {}
    logs = {}
    try:
        wait_port(port)
        for probe in ("readinessProbe", "livenessProbe"):
            cmd = [c.replace("redis-cli", f"redis-cli -p {port}") for c in redis_container[probe]["exec"]["command"]]
            res = subprocess.run(cmd, env={**os.environ, **renv}, capture_output=True, timeout=30)
            assert res.returncode == 0, (probe, res.stderr)

        def start(pool: str) -> None:
            dep = objects[("Deployment", f"evalfarm-{pool}")]
            container = dep["spec"]["template"]["spec"]["containers"][0]
            env = {k: v.replace(svc_host, f"@127.0.0.1:{port}/") for k, v in resolve_env(container, objects).items()}
            logs[pool] = tmp_path / f"{pool}.log"
            args = list(container["args"])  # each pod has its own network; here one host: one port each
            args[args.index("--metrics-port") + 1] = str(free_port())
            workers[pool] = subprocess.Popen([*EVALFARM, *args, "--loglevel", "INFO"],
                                             env=env_for(None, **env), stdout=open(logs[pool], "wb"),
                                             stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.time() + 60
            while b"ready." not in logs[pool].read_bytes():
                assert workers[pool].poll() is None and time.time() < deadline, logs[pool].read_text()[-2000:]
                time.sleep(0.1)

        def keda_backlog(pool: str) -> int:
            """LLEN of the list the pool's ScaledObject watches, on the database it names."""
            (trigger,) = objects[("ScaledObject", f"evalfarm-{pool}")]["spec"]["triggers"]
            md = trigger["metadata"]
            assert md["address"].startswith(f"{service['metadata']['name']}.")
            client = redis.Redis(host="127.0.0.1", port=port, password=password, db=int(md["databaseIndex"]))
            return client.llen(md["listName"])

        broker = objects[("Secret", "evalfarm-redis")]["stringData"]["broker-url"].replace(svc_host,
                                                                                           f"@127.0.0.1:{port}/")
        coordinator = subprocess.Popen([*EVALFARM, "run", str(EXAMPLES / "smoke.yaml"), "--broker", broker,
                                        "--no-save", "--json"], env=env_for(None), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        try:
            # no provider worker yet: the backlog is where KEDA looks for it
            deadline = time.time() + 30
            while keda_backlog("provider") == 0:
                assert coordinator.poll() is None and time.time() < deadline, coordinator.stderr.read()
                time.sleep(0.05)
            start("aggregate")
            start("provider")
            # the provider pool hands judged work to the judge queue: KEDA sees that backlog too
            deadline = time.time() + 30
            while keda_backlog("judge") == 0:
                assert coordinator.poll() is None and time.time() < deadline, coordinator.stderr.read()
                time.sleep(0.05)
            start("judge")
            start("spawn")  # idle here (no spawn dispatch yet), but it must come up with its settings
            out, err = coordinator.communicate(timeout=120)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 0, err
        assert keda_backlog("provider") == keda_backlog("judge") == keda_backlog("spawn") == 0
        assert password not in out + err
    finally:
        for w in workers.values():
            if w.poll() is None:
                os.kill(w.pid, signal.SIGTERM)
        codes = {}
        for pool, w in workers.items():
            try:
                codes[pool] = w.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                codes[pool] = None
        procs[0].terminate()
        procs[0].wait(10)
    assert codes == {"aggregate": 0, "provider": 0, "judge": 0, "spawn": 0}, \
        {p: logs[p].read_text()[-1500:] for p in logs}
