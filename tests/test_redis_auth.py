"""Redis with a password and with TLS (rediss://): a real redis-server, a real worker, the real CLI."""
from __future__ import annotations

import json
import secrets
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import redis

from conftest import EXAMPLES, RedisServer, free_port, run_cli
from evalfarm.errors import FarmError
from evalfarm.executors.celery.app import create_app
from evalfarm.executors.celery.redis_tls import split_tls
from evalfarm.executors.celery.settings import FarmSettings

SMOKE = str(EXAMPLES / "smoke.yaml")


def all_text_under(path: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(path.rglob("*")) if p.is_file())


# -- password ---------------------------------------------------------------------------------

@pytest.fixture
def password_redis(tmp_path):
    server = RedisServer(tmp_path, password="pw-" + secrets.token_hex(12))
    server.start()
    yield server
    server.stop()


def test_password_protected_redis_end_to_end_and_the_password_is_never_written(tmp_path, password_redis,
                                                                                start_worker):
    password = password_redis.password
    url = password_redis.url
    assert f":{password}@" in url
    worker = start_worker(url, concurrency=2)
    state = tmp_path / "state"
    res = run_cli("run", SMOKE, "--broker", url, "--state-dir", str(state), "--output", str(tmp_path / "out.json"))
    assert res.returncode == 0, res.stderr
    assert "PASSED" in res.stdout
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["mode"] == "redis" and len(report["outcomes"]) == 20
    saved = sorted(p.name for p in (state / "runs").iterdir())
    assert any(n.endswith(".json") for n in saved) and any(n.endswith(".md") for n in saved)
    # the password is nowhere: CLI output, the saved report/Markdown/lineage, the --output copy
    assert password not in res.stdout + res.stderr
    assert password not in all_text_under(state)
    assert password not in (tmp_path / "out.json").read_text()
    as_json = run_cli("run", SMOKE, "--broker", url, "--no-save", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert password not in as_json.stdout + as_json.stderr
    # the worker authenticated (it did the work) and did not log the password either
    assert password not in worker.log.read_text(errors="replace")


def test_wrong_or_missing_password_is_one_clear_line_without_the_secret(tmp_path, password_redis):
    wrong = "not-" + secrets.token_hex(8)
    # at once: a refused password is not a Redis restart to ride out with retries (~30 s and more)
    bad = run_cli("run", SMOKE, "--broker", f"redis://:{wrong}@127.0.0.1:{password_redis.port}/0", "--no-save",
                  timeout=25)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert wrong not in bad.stdout + bad.stderr and password_redis.password not in bad.stderr
    lines = bad.stderr.strip().splitlines()  # "connecting to ..." at once, then the one-line error
    assert "Traceback" not in bad.stderr and len(lines) == 2 and lines[0].startswith("evalfarm: connecting to ")
    assert "cannot reach the run store" in lines[1]
    none = run_cli("run", SMOKE, "--broker", f"redis://127.0.0.1:{password_redis.port}/0", "--no-save", timeout=25)
    assert none.returncode == 2 and "Traceback" not in none.stderr


def test_an_empty_password_in_the_url_means_no_auth(redis_server, start_worker):
    """docker-compose.yml builds redis://:${REDIS_PASSWORD:-}@redis:6379/0: unset, that is redis://:@...,
    which must work against a Redis without a password (kombu and redis-py send no AUTH)."""
    url = f"redis://:@127.0.0.1:{redis_server.port}/0"
    start_worker(url, concurrency=2)
    res = run_cli("run", SMOKE, "--broker", url, "--no-save")
    assert res.returncode == 0, res.stderr


# -- TLS: URL parsing and the Celery configuration ----------------------------------------------

def test_split_tls_verifies_by_default_and_reads_the_url_and_the_environment(monkeypatch):
    monkeypatch.delenv("EVALFARM_REDIS_CA_CERTS", raising=False)
    assert split_tls("redis://:pw@h:6379/0") == ("redis://:pw@h:6379/0", {})
    assert split_tls(None) == (None, {})
    url, opts = split_tls("rediss://:pw@h:6380/0")
    assert url == "rediss://:pw@h:6380/0" and opts == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    url, opts = split_tls("rediss://:pw@h:6380/2?ssl_cert_reqs=none&health_check_interval=10")
    assert url == "rediss://:pw@h:6380/2?health_check_interval=10" and opts == {"ssl_cert_reqs": ssl.CERT_NONE}
    monkeypatch.setenv("EVALFARM_REDIS_CA_CERTS", "/etc/ca.pem")
    assert split_tls("rediss://h/0?ssl_cert_reqs=CERT_REQUIRED")[1] == {"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                                                        "ssl_ca_certs": "/etc/ca.pem"}
    assert split_tls("rediss://h/0?ssl_ca_certs=/x.pem&ssl_check_hostname=false")[1] == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/x.pem", "ssl_check_hostname": False}
    with pytest.raises(FarmError, match="ssl_cert_reqs"):
        split_tls("rediss://h/0?ssl_cert_reqs=maybe")


def test_celery_gets_broker_use_ssl_for_rediss(monkeypatch):
    monkeypatch.setenv("EVALFARM_REDIS_CA_CERTS", "/etc/ca.pem")
    app = create_app(FarmSettings(broker_url="rediss://:pw@h:6380/0?ssl_cert_reqs=required",
                                  result_backend="rediss://:pw@h:6380/1"))
    assert app.conf.broker_url == "rediss://:pw@h:6380/0"
    assert app.conf.broker_use_ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/etc/ca.pem"}
    assert app.conf.redis_backend_use_ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/etc/ca.pem"}
    plain = create_app(FarmSettings(broker_url="redis://h:6379/0"))
    assert not plain.conf.broker_use_ssl


# -- TLS: a real redis-server on a TLS port, a certificate made by openssl ----------------------

def make_certs(d: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost, signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    ca_key, ca_crt, key, csr, crt = (d / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt"))
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for args in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_crt, "-days", "1",
         "-subj", "/CN=evalfarm test CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out", crt, "-days", "1",
         "-extfile", d / "ext.cnf"],
    ):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)
    return ca_crt, crt, key


@pytest.fixture
def tls_redis(tmp_path):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (.ci/run installs it)")
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, crt, key = make_certs(certs)
    port, password = free_port(), "tls-" + secrets.token_hex(12)
    log = tmp_path / "redis-tls.log"
    proc = subprocess.Popen([binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                             "--tls-cert-file", str(crt), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
                             "--tls-auth-clients", "no", "--requirepass", password, "--dir", str(tmp_path),
                             "--save", "", "--appendonly", "no", "--daemonize", "no"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    deadline = time.time() + 10
    while True:
        if proc.poll() is not None:
            text = log.read_text(errors="replace")
            if "tls" in text.lower() and ("not" in text.lower() or "support" in text.lower()):
                pytest.skip(f"this redis-server was built without TLS: {text.strip().splitlines()[-1]}")
            raise RuntimeError(f"redis-server (TLS) exited: {text[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.time() > deadline:
                proc.kill()
                raise RuntimeError("redis-server (TLS) did not start")
            time.sleep(0.05)
    yield {"url": f"rediss://:{password}@127.0.0.1:{port}/0", "ca": str(ca), "password": password, "port": port}
    proc.terminate()
    proc.wait(10)


def test_rediss_end_to_end_with_a_verified_certificate(tmp_path, tls_redis, start_worker):
    url, ca = tls_redis["url"], tls_redis["ca"]
    worker = start_worker(url, concurrency=2, EVALFARM_REDIS_CA_CERTS=ca)
    res = run_cli("run", SMOKE, "--broker", url, "--state-dir", str(tmp_path / "state"), "--json",
                  EVALFARM_REDIS_CA_CERTS=ca)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["mode"] == "redis" and len(report["outcomes"]) == 20 and report["thresholds_passed"]
    assert tls_redis["password"] not in res.stdout + res.stderr + all_text_under(tmp_path / "state")
    assert tls_redis["password"] not in worker.log.read_text(errors="replace")

    # the CA given in the URL instead of the environment
    res = run_cli("run", SMOKE, "--broker", f"{url}?ssl_cert_reqs=required&ssl_ca_certs={ca}", "--no-save")
    assert res.returncode == 0, res.stderr

    # certificates are verified by default: without the CA the self-signed chain is refused ...
    refused = run_cli("run", SMOKE, "--broker", url, "--no-save", timeout=25)  # at once, no retries
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "cannot reach the run store" in refused.stderr and "certificate" in refused.stderr.lower()
    assert tls_redis["password"] not in refused.stderr
    # ... unless the URL opts out of verification (encryption only)
    res = run_cli("run", SMOKE, "--broker", f"{url}?ssl_cert_reqs=none", "--no-save")
    assert res.returncode == 0, res.stderr


def test_plain_redis_client_is_refused_by_the_tls_port(tls_redis):
    """The server really speaks only TLS: a plain client to the same port gets nowhere."""
    plain = redis.Redis(host="127.0.0.1", port=tls_redis["port"], password=tls_redis["password"],
                        socket_timeout=5, retry=None)
    with pytest.raises(redis.exceptions.ConnectionError):
        plain.ping()
