"""https:// endpoints verify certificates on the real transport. evalfarm imports aiohttp without
the default TLS contexts aiohttp builds at import (providers/aio.py: ~50-75 ms of every command):
this proves that saving costs no verification. A server with a certificate from an unknown CA is
refused; trusting that CA (SSL_CERT_FILE, which httpx honours) makes the same run pass."""
from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import run_cli
from test_redis_auth import make_certs


class Completions(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"id": "c1", "object": "chat.completion", "model": "m",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": "over TLS"},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def tls_server(tmp_path):
    ca, crt, key = make_certs(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Completions)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/v1", ca
    server.shutdown()


def test_https_verifies_the_certificate_and_trusts_a_given_ca(tmp_path, tls_server):
    url, ca = tls_server
    (tmp_path / "s.yaml").write_text(f"name: tls\nadapters:\n  - {{id: m, model: m, base_url: '{url}'}}\n"
                                     "prompts:\n  - {id: a, text: hi, expected_output_contains: [TLS]}\n")
    refused = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", "--json", EVAL_API_KEY="k")
    assert refused.returncode == 3, refused.stderr  # nothing measured: the certificate is not trusted
    error = json.loads(refused.stdout)["outcomes"][0]["error"]
    assert error["class"] == "CertificateError" and "certificate verify failed" in error["message"], error
    assert f"TLS: {url}/chat/completions presented a certificate this host does not trust" in error["message"]
    assert "SSL_CERT_FILE" in error["message"] and error["attempts"] == 1, error  # not retried: it will not change
    trusted = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", "--json", EVAL_API_KEY="k", SSL_CERT_FILE=str(ca))
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert json.loads(trusted.stdout)["outcomes"][0]["output"] == "over TLS"


def test_aiohttps_own_default_context_fails_closed():
    """The context aiohttp would fall back to (never, with our transport) verifies and trusts no CA."""
    import subprocess
    import sys

    from conftest import env_for
    code = ("import ssl, evalfarm.providers.aio, aiohttp.connector as c\n"
            "v = c._SSL_CONTEXT_VERIFIED\n"
            "print(v.verify_mode == ssl.CERT_REQUIRED, v.check_hostname, v.cert_store_stats()['x509_ca'])\n"
            "print(ssl.create_default_context().cert_store_stats()['x509_ca'] > 0)")  # ssl itself is untouched
    res = subprocess.run([sys.executable, "-c", code], env=env_for(), capture_output=True, text=True, timeout=60)
    assert res.stdout.split() == ["True", "True", "0", "True"], res.stdout + res.stderr
