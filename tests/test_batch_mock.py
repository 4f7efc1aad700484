"""mock-provider's batch APIs over real HTTP: OpenAI files + batches, Anthropic message batches, and the faults
(delay, failed lines, expiry, cancellation, a size limit) the batch tests rely on."""
from __future__ import annotations

import json
import time

import httpx

KEY = "sk-batch-test"


def _wait(get, until, deadline_s: float = 20.0):
    deadline = time.monotonic() + deadline_s
    while True:
        got = get()
        if until(got):
            return got
        assert time.monotonic() < deadline, f"condition not met: {got}"
        time.sleep(0.05)


def _line(cid: str, text: str) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "m", "messages": [{"role": "user", "content": text}]}})


def _openai_batch(c: httpx.Client, base: str, lines: list[str], metadata: dict | None = None) -> dict:
    up = c.post(f"{base}/files", data={"purpose": "batch"},
                files={"file": ("in.jsonl", "\n".join(lines).encode(), "application/jsonl")})
    assert up.status_code == 200, up.text
    r = c.post(f"{base}/batches", json={"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions",
                                        "completion_window": "24h", "metadata": metadata or {}})
    assert r.status_code == 200, r.text
    return r.json()


def _rows(c: httpx.Client, base: str, fid: str | None) -> list[dict]:
    if not fid:
        return []
    r = c.get(f"{base}/files/{fid}/content")
    assert r.status_code == 200
    return [json.loads(x) for x in r.text.splitlines() if x.strip()]


def test_openai_batch_lifecycle_failures_metadata_and_counts(provider):
    mock = provider("--api-key", KEY, "--batch-delay", "0.4")
    base = mock.url
    with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=10) as c:
        assert httpx.post(f"{base}/batches", json={}).status_code == 401  # no key: refused
        lines = [_line(f"k{i}", f"item {i}") for i in range(5)] + [_line("bad", "item bad [[batch-error]]")]
        b = _openai_batch(c, base, lines, {"evalfarm_run": "r1", "evalfarm_batch": "a:0"})
        assert b["status"] == "in_progress" and b["metadata"]["evalfarm_run"] == "r1"
        assert c.get(f"{base}/batches/{b['id']}").json()["status"] == "in_progress"  # before its delay
        assert mock.stats()["requests"] == 0  # nothing answered yet
        done = _wait(lambda: c.get(f"{base}/batches/{b['id']}").json(), lambda x: x["status"] == "completed")
        assert done["request_counts"] == {"total": 6, "completed": 5, "failed": 1}
        out = {r["custom_id"]: r for r in _rows(c, base, done["output_file_id"])}
        err = {r["custom_id"]: r for r in _rows(c, base, done["error_file_id"])}
        assert set(out) == {f"k{i}" for i in range(5)} and set(err) == {"bad"}
        assert out["k3"]["response"]["body"]["choices"][0]["message"]["content"] == "item 3"
        assert err["bad"]["response"]["status_code"] == 500
        listed = c.get(f"{base}/batches?limit=10").json()
        assert [x["id"] for x in listed["data"]] == [b["id"]] and listed["data"][0]["metadata"]["evalfarm_batch"] == "a:0"
        # the same bad prompt sent live is answered: [[batch-error]] fails it inside batches only
        live = c.post(f"{base}/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "item bad [[batch-error]]"}]})
        assert live.status_code == 200
        stats = httpx.get(f"http://127.0.0.1:{mock.port}/stats?items=1").json()
        assert stats["batch_items"] == {**{f"k{i}": 1 for i in range(5)}, "bad": 1}
        assert stats["asked"]["item bad [[batch-error]]"] == 2 and stats["asked"]["item 0"] == 1
        assert stats["batch_creates"] == 1

        # expiry: nothing is answered, every line is in the error file as batch_expired
        e = _openai_batch(c, base, [_line("e1", "x [[batch-expire]] [[batch-delay:100]]"), _line("e2", "y")])
        ended = _wait(lambda: c.get(f"{base}/batches/{e['id']}").json(), lambda x: x["status"] == "expired")
        rows = _rows(c, base, ended["error_file_id"])
        assert {r["custom_id"] for r in rows} == {"e1", "e2"} and {r["error"]["code"] for r in rows} == {"batch_expired"}
        assert ended["output_file_id"] is None

        # cancellation before its time: cancelling, then cancelled, nothing answered
        k = _openai_batch(c, base, [_line("c1", "z [[batch-delay:60000]]")])
        assert c.post(f"{base}/batches/{k['id']}/cancel").json()["status"] == "cancelling"
        assert c.get(f"{base}/batches/{k['id']}").json()["status"] == "cancelled"
        stats = httpx.get(f"http://127.0.0.1:{mock.port}/stats?items=1").json()
        assert stats["batch_cancels"] == [k["id"]] and "c1" not in stats["batch_items"]
        assert "e1" not in stats["batch_items"]


def test_openai_batch_limit_and_bad_input(provider):
    mock = provider("--batch-max-requests", "3")
    base = mock.url
    with httpx.Client(timeout=10) as c:
        b = _openai_batch(c, base, [_line(f"k{i}", f"t{i}") for i in range(4)])
        assert b["status"] == "failed" and b["errors"]["data"][0]["code"] == "batch_too_large"
        up = c.post(f"{base}/files", data={"purpose": "batch"}, files={"file": ("x", b"not json\n")})
        r = c.post(f"{base}/batches", json={"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions",
                                            "completion_window": "24h"})
        assert r.status_code == 400
        dup = _line("same", "a") + "\n" + _line("same", "b")
        up = c.post(f"{base}/files", data={"purpose": "batch"}, files={"file": ("x", dup.encode())})
        assert c.post(f"{base}/batches", json={"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions",
                                               "completion_window": "24h"}).status_code == 400


def test_anthropic_message_batches(provider):
    mock = provider("--api-key", KEY, "--batch-delay", "0.3")
    root = f"http://127.0.0.1:{mock.port}/v1/messages/batches"
    h = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}

    def req(cid: str, text: str) -> dict:
        return {"custom_id": cid, "params": {"model": "claude", "max_tokens": 64,
                                             "messages": [{"role": "user", "content": text}]}}

    with httpx.Client(headers=h, timeout=10) as c:
        assert httpx.post(root, json={"requests": []}, headers={"anthropic-version": "2023-06-01"}).status_code == 401
        b = c.post(root, json={"requests": [req("a", "hello a"), req("b", "b [[batch-error]]")]}).json()
        assert b["type"] == "message_batch" and b["processing_status"] == "in_progress"
        assert c.get(f"{root}/{b['id']}/results").status_code == 400  # not ended yet
        done = _wait(lambda: c.get(f"{root}/{b['id']}").json(), lambda x: x["processing_status"] == "ended")
        assert done["request_counts"]["succeeded"] == 1 and done["request_counts"]["errored"] == 1
        rows = {r["custom_id"]: r["result"] for r in
                (json.loads(x) for x in c.get(f"{root}/{b['id']}/results").text.splitlines())}
        assert rows["a"]["type"] == "succeeded" and rows["a"]["message"]["content"][0]["text"] == "hello a"
        assert rows["b"]["type"] == "errored"
        x = c.post(root, json={"requests": [req("x", "x [[batch-expire]]")]}).json()
        ended = _wait(lambda: c.get(f"{root}/{x['id']}").json(), lambda y: y["processing_status"] == "ended")
        assert ended["request_counts"]["expired"] == 1
        k = c.post(root, json={"requests": [req("k", "k [[batch-delay:60000]]")]}).json()
        assert c.post(f"{root}/{k['id']}/cancel").json()["processing_status"] == "canceling"
        got = c.get(f"{root}/{k['id']}").json()
        assert got["processing_status"] == "ended" and got["request_counts"]["canceled"] == 1
        listed = c.get(f"{root}?limit=2").json()
        assert len(listed["data"]) == 2 and listed["has_more"] is True
        rest = c.get(f"{root}?limit=2&after_id={listed['last_id']}").json()
        assert [r["id"] for r in rest["data"]] == [b["id"]]
        stats = httpx.get(f"http://127.0.0.1:{mock.port}/stats?items=1").json()
        assert stats["batch_items"] == {"a": 1, "b": 1} and stats["batch_cancels"] == [k["id"]]
