"""``magnetar tokens`` as a real process: keys and tokens made, validated and shown round trip."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest


def tokens(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "tokens", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def ok(*argv: str) -> str:
    done = tokens(*argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_secret_key_create_validate_show(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    ok("create-secret-key", "--output", str(key))
    assert len(key.read_bytes()) == 32  # raw HS256 key bytes, as pulsar tokens writes them
    token = ok("create", "--secret-key", f"file://{key}", "--subject", "alice", "--expiry-time", "1d")
    claims = json.loads(ok("validate", "--secret-key", f"file://{key}", token))
    assert claims["sub"] == "alice"
    assert abs(claims["exp"] - (time.time() + 86400)) < 60
    header, _, body = ok("show", token).partition("\n---\n")
    assert json.loads(header)["alg"] == "HS256" and json.loads(body)["sub"] == "alice"
    # The same key as a data: URL (base64), and a token read from a file.
    data_url = "data:;base64," + base64.b64encode(key.read_bytes()).decode()
    (tmp_path / "token").write_text(token + "\n")
    assert json.loads(ok("validate", "-sk", data_url, "-f", str(tmp_path / "token")))["sub"] == "alice"


def test_base64_secret_key_goes_to_stdout() -> None:
    assert len(base64.b64decode(ok("create-secret-key", "--base64"), validate=True)) == 32


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_create_validate(tmp_path: Path, algorithm: str) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    ok("create-key-pair", "-a", algorithm, "--output-private-key", str(private), "--output-public-key", str(public))
    token = ok("create", "--private-key", f"file://{private}", "--subject", "bob", "-a", algorithm)
    assert json.loads(ok("show", token).split("\n---\n")[0])["alg"] == algorithm
    assert json.loads(ok("validate", "--public-key", f"file://{public}", "-a", algorithm, token)) == {"sub": "bob"}
    # Without -a, the algorithm follows the key.
    assert json.loads(ok("validate", "--public-key", f"file://{public}", token)) == {"sub": "bob"}


def test_validate_refuses_another_key_and_an_expired_token(tmp_path: Path) -> None:
    one, two = tmp_path / "one.key", tmp_path / "two.key"
    ok("create-secret-key", "-o", str(one))
    ok("create-secret-key", "-o", str(two))
    token = ok("create", "-sk", f"file://{one}", "-s", "carol")
    refused = tokens("validate", "-sk", f"file://{two}", token)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.strip() == "magnetar tokens validate: token signature is invalid"
    expired = ok("create", "-sk", f"file://{one}", "-s", "carol", "-e", "0s")
    refused = tokens("validate", "-sk", f"file://{one}", expired)
    assert refused.returncode == 1 and refused.stderr.strip() == "magnetar tokens validate: token expired"


def test_create_needs_exactly_one_key(tmp_path: Path) -> None:
    refused = tokens("create", "-s", "dave")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "Exactly one of --secret-key and --private-key needs to be passed"
    missing = tokens("create", "-s", "dave", "-sk", f"file://{tmp_path}/absent.key")
    assert missing.returncode == 1 and "cannot read key file" in missing.stderr
