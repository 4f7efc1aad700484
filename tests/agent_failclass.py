#!/usr/bin/env python3
"""A `command:` agent for the failure-class tests: agent_failclass.py BASE_URL PROMPT.

It asks the model endpoint once with PROMPT (with the key in EVAL_API_KEY: the relay's per-task token) (a `[[status:503]]` in it makes the mock answer 503: the
agent then reports the endpoint's error and exits 1, as a real CLI does), then runs PROMPT's last line
with /bin/sh in its worktree (`exec /nonexistent/cli` is a CLI that cannot start: exit 127).
"""
import json
import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    base_url, prompt = sys.argv[1], sys.argv[2]
    body = json.dumps({"model": "fake-1", "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", body,
                                 {"Content-Type": "application/json",
                                  "Authorization": "Bearer " + (os.environ.get("EVAL_API_KEY") or "sk-fake")})
    try:
        urllib.request.urlopen(req, timeout=10).read()
    except urllib.error.HTTPError as exc:
        print(f"model endpoint error: HTTP {exc.code} {exc.reason}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv("/bin/sh", ["sh", "-c", prompt.strip().splitlines()[-1]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
