"""Issue 10, item 11: the audit chain cannot be cut short, emptied or deleted without `audit verify` and
`ab verify` saying so; its signed head cannot be rewritten without the key; and the artifacts and the
pair index name entries the chain must still hold. Real A/B runs through the CLI in subprocesses."""
from __future__ import annotations

import hmac
import json
import shutil
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli

SUITE = str(EXAMPLES / "ab" / "suite.yaml")
PAIRS = (("balanced", "terse"), ("balanced", "verbose"), ("terse", "verbose"))


def emit(cwd: Path, a: str, b: str) -> None:
    res = run_cli("ab", "--suite", SUITE, "--arm-a", a, "--arm-b", b, cwd=cwd)
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Path:
    """A state dir with three emissions (three artifacts, three chain entries, three pair-index lines)."""
    cwd = tmp_path_factory.mktemp("three")
    for a, b in PAIRS:
        emit(cwd, a, b)
    return cwd


@pytest.fixture
def cwd(three, tmp_path) -> Path:
    shutil.copytree(three / ".evalfarm", tmp_path / ".evalfarm")
    return tmp_path


def chain(cwd: Path) -> Path:
    return cwd / ".evalfarm" / "audit" / "chain.jsonl"


def artifact_of_entry(cwd: Path, seq: int) -> Path:
    entry = json.loads(chain(cwd).read_text().splitlines()[seq - 1])
    return cwd / ".evalfarm" / "reports" / "eval_ab" / f"{entry['data']['artifact_sha256']}.json"


def audit_verify(cwd: Path, *args: str):
    return run_cli("audit", "verify", *args, cwd=cwd)


def test_an_intact_chain_verifies(cwd):
    res = audit_verify(cwd)
    assert res.returncode == 0 and res.stdout.startswith("OK: 3 entries verified"), res.stdout + res.stderr
    for seq in (1, 2, 3):
        assert run_cli("ab", "verify", str(artifact_of_entry(cwd, seq)), cwd=cwd).returncode == 0


@pytest.mark.parametrize("cut", ["last entry", "two entries", "emptied", "deleted"])
def test_a_cut_chain_is_broken(cwd, cut):
    lines = chain(cwd).read_text().splitlines()
    last = artifact_of_entry(cwd, 3)
    if cut == "deleted":
        chain(cwd).unlink()
    else:
        keep = {"last entry": 2, "two entries": 1, "emptied": 0}[cut]
        chain(cwd).write_text("".join(x + "\n" for x in lines[:keep]))
    res = audit_verify(cwd)
    assert res.returncode == 1, (cut, res.stdout, res.stderr)
    assert res.stdout.startswith("BROKEN: entry ") and "its head records 3" in res.stdout, res.stdout
    res = run_cli("ab", "verify", str(last), cwd=cwd)
    assert res.returncode == 1 and "FAIL audit event" in res.stdout and "NOT VERIFIED" in res.stdout
    # a chain that does not match its head is never extended
    res = run_cli("ab", "--suite", SUITE, "--arm-a", "baseline", "--arm-b", "terse", cwd=cwd)
    assert res.returncode == 4 and "broken" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_the_head_cannot_be_forged_without_the_key(cwd):
    lines = chain(cwd).read_text().splitlines()
    chain(cwd).write_text(lines[0] + "\n")
    head_path = cwd / ".evalfarm" / "audit" / "chain.head"
    head = json.loads(head_path.read_text())
    # the truthful count and digest of the cut chain, with the old signature (the attacker has no key)
    head_path.write_text(json.dumps({**head, "count": 1, "digest": json.loads(lines[0])["digest"]}))
    res = audit_verify(cwd)
    assert res.returncode == 1 and "chain.head: HMAC mismatch" in res.stdout, res.stdout
    head_path.unlink()  # and without a head at all
    res = audit_verify(cwd)
    assert res.returncode == 1 and "chain.head is missing" in res.stdout, res.stdout


def test_a_rolled_back_chain_is_caught_by_what_cites_it(cwd):
    """Cut back to one entry with that time's head put back (a copy saved then: made here with the key):
    the chain matches its head, but the artifacts and the pair index written since name entries it no
    longer has."""
    audit_dir = cwd / ".evalfarm" / "audit"
    lines = chain(cwd).read_text().splitlines()
    chain(cwd).write_text(lines[0] + "\n")
    key = (audit_dir / "chain.key").read_text().strip().encode()
    digest = json.loads(lines[0])["digest"]
    mac = hmac.new(key, f"evalfarm.audit.head\n1\n{digest}".encode(), "sha256").hexdigest()
    (audit_dir / "chain.head").write_text(json.dumps({"count": 1, "digest": digest, "hmac": mac}))
    res = audit_verify(cwd)
    assert res.returncode == 1, res.stdout
    assert "pair_index.jsonl:2: artifact" in res.stdout and "cites audit entry 2, which the chain no longer has" \
        in res.stdout, res.stdout
    res = run_cli("ab", "verify", str(artifact_of_entry(cwd, 1)), cwd=cwd)
    assert res.returncode == 0, res.stdout  # the first artifact's entry is still there


def test_seal_vouches_for_a_chain_made_before_heads(cwd):
    (cwd / ".evalfarm" / "audit" / "chain.head").unlink()
    assert audit_verify(cwd).returncode == 1
    res = audit_verify(cwd, "--seal")
    assert res.returncode == 0 and res.stdout.startswith("SEALED:") and "3 entries" in res.stdout
    assert audit_verify(cwd).returncode == 0
    emit(cwd, "baseline", "verbose")  # and the chain grows again, head and all
    assert audit_verify(cwd).stdout.startswith("OK: 4 entries verified")


def test_verify_beside_concurrent_appends_never_cries_cut(tmp_path):
    """`ab` checks the chain before it runs, and CI runs A/Bs side by side: a verify that reads the chain
    just before another process appends (entry, then head) must not call the chain cut short."""
    import subprocess
    import sys

    from conftest import env_for
    from evalfarm.ab import audit

    audit_dir = tmp_path / "audit"
    audit.append(audit_dir, "start", {"n": 0})
    writer = subprocess.Popen([sys.executable, "-c", "import sys\nfrom evalfarm.ab import audit\n"
                               "for i in range(400): audit.append(sys.argv[1], 'e', {'n': i})", str(audit_dir)],
                              env=env_for())
    verified = 0
    while writer.poll() is None:
        good, broken = audit.verify(audit_dir)
        assert broken is None, broken
        verified += 1
    assert writer.returncode == 0 and verified > 20
    good, broken = audit.verify(audit_dir)
    assert broken is None and len(good) == 401
