"""`evalfarm mock-provider --agent-script` over real HTTP: each agent protocol gets the scripted step
chosen from the tool results already in the request, in that agent's tool vocabulary, with the usage
figures it logs; bad scripts are one line, exit 2; the plain OpenAI behaviour is unchanged."""
from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from agents_fixtures import EDIT_SCRIPT, agent_server  # noqa: F401
from conftest import EVALFARM, env_for, free_port

CWD = "/work/task/wt-1"


def sse(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def post(server, path: str, body: dict) -> httpx.Response:
    r = httpx.post(server.url.removesuffix("/v1") + path, json=body, timeout=10)
    assert r.status_code == 200, r.text
    return r


def test_anthropic_messages_play_read_edit_say_by_tool_results(agent_server):
    server = agent_server(EDIT_SCRIPT)
    tools = [{"name": "Read", "input_schema": {"properties": {"file_path": {}}, "required": ["file_path"]}},
             {"name": "Edit", "input_schema": {"properties": {"file_path": {}, "old_string": {}, "new_string": {},
                                                              "replace_all": {"type": "boolean"}}}}]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}
    body = {"model": "claude-x", "stream": True, "tools": tools, "system": [{"text": f"Working directory: {CWD}"}],
            "messages": [{"role": "user", "content": "go"}]}
    read = sse(post(server, "/v1/messages", body))
    assert read[1]["content_block"]["name"] == "Read"
    assert json.loads(read[2]["delta"]["partial_json"]) == {"file_path": f"{CWD}/hello.py"}
    assert read[0]["message"]["usage"]["input_tokens"] == 1000 and read[-2]["usage"]["output_tokens"] == 20
    body["messages"] += [{"role": "assistant", "content": []}, result]
    edit = sse(post(server, "/v1/messages", body))
    assert json.loads(edit[2]["delta"]["partial_json"]) == {
        "file_path": f"{CWD}/hello.py", "old_string": 'print("hello")', "new_string": 'print("hello, world")'}
    body["messages"] += [{"role": "assistant", "content": []}, result]
    say = sse(post(server, "/v1/messages", body))
    assert say[2]["delta"]["text"] == "Done: greeting updated." and say[-2]["delta"]["stop_reason"] == "end_turn"
    side = post(server, "/v1/messages", {"model": "claude-haiku", "messages": [{"role": "user", "content": "title?"}]})
    assert side.json()["content"] == [{"type": "text", "text": "ok"}]
    log = server.log()
    assert [(e["step"], e["kind"], e["usage"]["input_tokens"]) for e in log] == [
        (0, "read", 1000), (1, "edit", 1500), (2, "say", 2000), (None, "say", 123)]


def test_responses_api_uses_apply_patch_or_the_shell_codex_offers(agent_server, tmp_path):
    server = agent_server(EDIT_SCRIPT)
    shell_only = [{"type": "function", "name": "exec_command", "parameters": {"properties": {"cmd": {}}}}]
    work = tmp_path / "wt"  # the agent's working directory, on this host: the mock reads the lines it edits
    work.mkdir()
    (work / "hello.py").write_text('print("hello")\n')
    ctx = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"<cwd>{work}</cwd>"}]}
    events = sse(post(server, "/v1/responses", {"model": "gpt-x", "input": [ctx], "tools": shell_only}))
    item = events[-1]["response"]["output"][0]
    assert (item["type"], item["name"], json.loads(item["arguments"])) == ("function_call", "exec_command",
                                                                          {"cmd": "cat hello.py"})
    assert events[-1]["response"]["usage"]["input_tokens"] == 1000
    with_patch = [*shell_only, {"type": "custom", "name": "apply_patch"}]
    done = {"type": "function_call_output", "call_id": "c", "output": "x"}
    events = sse(post(server, "/v1/responses", {"model": "gpt-x", "input": [ctx, done], "tools": with_patch}))
    item = events[-1]["response"]["output"][0]
    assert item["type"] == "custom_tool_call" and item["input"] == (
        '*** Begin Patch\n*** Update File: hello.py\n@@\n-print("hello")\n+print("hello, world")\n*** End Patch\n')
    events = sse(post(server, "/v1/responses", {"model": "gpt-x", "input": [ctx, done, done], "tools": with_patch}))
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Done: greeting updated."
    # a file out of the mock's reach: the shell form of the same exactly-once replacement
    elsewhere = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"<cwd>{CWD}</cwd>"}]}
    events = sse(post(server, "/v1/responses", {"model": "gpt-x", "input": [elsewhere, done], "tools": with_patch}))
    item = events[-1]["response"]["output"][0]
    assert item["name"] == "exec_command" and "t.count(sys.argv[2])" in json.loads(item["arguments"])["cmd"]


INDENTED = "def sub(a, b):\n    return a - b  # sub\n\n\ndef double(x):\n    if x:\n        return x * 2\n    return 0\n"
EDITED = "def sub(a, b):\n    return a + b  # sub\n\n\ndef double(x):\n    if x:\n        return x * 3\n    return 0\n"


def test_an_edit_is_matched_by_content_with_indentation_kept_whatever_the_tool(tmp_path):
    """`old` inside an indented line (or a part of it): whole_lines widens it to the lines apply_patch and
    aider replace, the shell form replaces it in place; all three give Claude Code's Edit's file."""
    from evalfarm.mock.script import Step, shell_edit, whole_lines

    path = tmp_path / "calc.py"
    steps = [Step("edit", 1, (1, 1), path="calc.py", old="return a - b", new="return a + b"),
             Step("edit", 2, (1, 1), path="calc.py", old="x * 2", new="x * 3")]
    path.write_text(INDENTED)
    for step in steps:  # whole lines, replaced as apply_patch replaces them
        old, new = whole_lines(step, str(tmp_path))
        assert old.startswith("    ") and new.startswith("    ")
        path.write_text(path.read_text().replace(old + "\n", new + "\n", 1))
    assert path.read_text() == EDITED
    path.write_text(INDENTED)
    for step in steps:  # the shell form, run by a real shell in the agent's directory
        done = subprocess.run(["bash", "-c", shell_edit(step)], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert path.read_text() == EDITED
    compile(path.read_text(), "calc.py", "exec")
    # text that is not there exactly once: no whole lines, and the shell form fails loudly, file unchanged
    twice = Step("edit", 3, (1, 1), path="calc.py", old="return", new="yield")
    assert whole_lines(twice, str(tmp_path)) is None
    done = subprocess.run(["bash", "-c", shell_edit(twice)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "old text found 3 times, expected once" in done.stderr
    assert path.read_text() == EDITED


def test_chat_completions_with_tools_stream_a_tool_call_and_usage(agent_server):
    server = agent_server(EDIT_SCRIPT)
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"properties": {"filePath": {}}}}}]
    body = {"model": "m", "stream": True, "tools": tools,
            "messages": [{"role": "system", "content": f"Working directory: {CWD}"}, {"role": "user", "content": "go"}]}
    chunks = sse(post(server, "/v1/chat/completions", body))
    call = next(c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls"))
    assert json.loads(call["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]) == {
        "filePath": f"{CWD}/hello.py"}
    assert chunks[-1]["usage"] == {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}
    body["messages"].append({"role": "tool", "tool_call_id": "c", "content": "x"})
    r = httpx.post(server.url + "/chat/completions", json={**body, "stream": False}, timeout=10)
    assert r.status_code == 400 and "needs one of ('Edit', 'edit', 'replace')" in r.json()["error"]["message"]


def test_chat_completions_for_aider_get_search_replace_blocks_and_plain_chat_still_echoes(agent_server):
    server = agent_server(EDIT_SCRIPT)
    aider = {"model": "m", "messages": [{"role": "system", "content": "Use *SEARCH/REPLACE* blocks"},
                                        {"role": "user", "content": "change it"}]}
    reply = post(server, "/v1/chat/completions", aider).json()
    assert reply["choices"][0]["message"]["content"].startswith(
        'hello.py\n```\n<<<<<<< SEARCH\nprint("hello")\n=======\nprint("hello, world")\n>>>>>>> REPLACE\n```\n')
    assert reply["usage"]["prompt_tokens"] == 1500
    plain = post(server, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "echo me"}]})
    assert plain.json()["choices"][0]["message"]["content"] == "echo me"
    assert httpx.get(server.url.removesuffix("/v1") + "/stats").json()["requests"] == 1
    assert [e["protocol"] for e in server.log()] == ["chat-aider"]  # the eval request is not an agent call


def test_gemini_function_calls_and_structured_side_calls(agent_server):
    server = agent_server(EDIT_SCRIPT)
    decls = [{"name": "read_file", "parametersJsonSchema": {"properties": {"absolute_path": {}}}}]
    body = {"contents": [{"role": "user", "parts": [{"text": f"- **Workspace Directories:**\n  - {CWD}\n"}]}],
            "tools": [{"functionDeclarations": decls}]}
    out = sse(post(server, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", body))[0]
    assert out["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "read_file", "args": {"absolute_path": f"{CWD}/hello.py"}}}]
    assert out["usageMetadata"]["promptTokenCount"] == 1000
    schema = {"type": "object", "required": ["reasoning", "next_speaker"],
              "properties": {"reasoning": {"type": "string"}, "next_speaker": {"type": "string", "enum": ["model", "user"]}}}
    side = post(server, "/v1beta/models/gemini-flash:generateContent",
                {"contents": [], "generationConfig": {"responseJsonSchema": schema}}).json()
    assert json.loads(side["candidates"][0]["content"]["parts"][0]["text"]) == {"reasoning": "scripted",
                                                                               "next_speaker": "user"}
    assert [e["model"] for e in server.log()] == ["gemini-x", "gemini-flash"]
    assert httpx.get(server.url.removesuffix("/v1") + "/nothing-here").status_code == 404
    assert server.log()[-1]["kind"] == "404"


@pytest.mark.parametrize("text, line, message", [
    ("steps: []\n", 1, "steps: expected a mapping with a non-empty list `steps:`"),
    ("steps:\n  - read: a.py\n  - {read: a.py, say: hi}\n", 3, "steps[1]: expected exactly one of read, edit, shell, say"),
    ("steps:\n  - say: hi\n  - edit: {file: a.py, old: x}\n", 3, "steps[1]: edit: expected {file: PATH, old: TEXT, new: TEXT}"),
    ("steps:\n  - say: hi\n    usage: {input_tokens: -1}\n", 2, "steps[0]: usage: expected {input_tokens: N, output_tokens: N}"),
    ("usage: 5\nsteps:\n  - say: hi\n", 1, "usage: expected {input_tokens: N, output_tokens: N}"),
    ("steps: [\n", 2, "not valid YAML"),
])
def test_a_bad_agent_script_is_one_line_exit_2(tmp_path, text, line, message):
    script = tmp_path / "script.yaml"
    script.write_text(text)
    done = subprocess.run([*EVALFARM, "mock-provider", "--port", str(free_port()), "--agent-script", str(script)],
                          env=env_for(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{script}:{line}: {message}" in lines[0], done.stderr
