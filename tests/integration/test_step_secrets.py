"""Step secrets (``secrets: [NAME]``), with real podman containers: the step sees each value
as $NAME and as /run/secrets/NAME (mode 0400, its user's), a detached run and a resume read
them again from the environment or the secrets file, and no value is left anywhere under
HETFLOW_HOME (store, run directory, logs: ``hetflow logs`` shows *** where the step printed it).
A missing secret is refused (exit 2) before anything is recorded or reset."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

# the step prints the token (to be masked), and writes what it saw as digests, never values
SEEN = (
    'echo "token is $API_TOKEN"; '
    "{ stat -c '%a %u' /run/secrets/API_TOKEN /run/secrets/DB_PASS; "
    'printf %s "$API_TOKEN" | sha256sum; sha256sum < /run/secrets/DB_PASS; printf %s "$DB_PASS" | sha256sum; } '
    "> /out/seen"
)


def _workflow(tmp_path: Path, then_fail: bool = False) -> str:
    fail = "  t:\n    image: {img}\n    needs: [s]\n    command: [sh, -c, 'exit 3']\n" if then_fail else ""
    return write(
        tmp_path,
        f"""apiVersion: hetflow/v1
name: secrets
steps:
  s:
    image: {BUSYBOX}
    secrets: [API_TOKEN, DB_PASS]
    outputs: [seen]
    command: {json.dumps(["sh", "-c", SEEN])}
"""
        + fail.format(img=BUSYBOX),
    )


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _files_holding(root: Path, value: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and value in p.read_bytes()]


def _wait_ended(hf: Hetflow, run_id: str) -> dict[str, object]:
    ended: list[dict[str, object]] = []

    def done() -> bool:
        ended[:] = [hf.show(run_id)]
        return ended[0]["state"] in ("succeeded", "failed", "stopped")

    hf.wait_for(done)
    return ended[0]


def test_a_detached_run_gives_the_step_its_secrets_and_keeps_no_value(tmp_path: Path, hf: Hetflow) -> None:
    token, password = "tok-" + secrets.token_hex(8), "pw-" + secrets.token_hex(8)
    secrets_file = tmp_path / "secrets.env"
    secrets_file.write_text(f"# for the test\nDB_PASS={password}\n")
    run_id = hf(
        "run", "-d", _workflow(tmp_path), "--secrets-file", str(secrets_file), extra_env={"API_TOKEN": token}
    ).stdout.strip()
    record = _wait_ended(hf, run_id)
    assert record["state"] == "succeeded", record

    seen = (step_out(hf, run_id, "s") / "seen").read_text().split()
    uid = str(os.getuid())
    assert seen[:4] == ["400", uid, "400", uid]  # both files: mode 0400, the step's user
    assert seen[4::2] == [_sha(token), _sha(password), _sha(password)]  # $API_TOKEN, the file, $DB_PASS

    logs = hf("logs", run_id, "s").stdout
    assert "token is ***" in logs and token not in logs
    for value in (token, password):
        assert _files_holding(hf.home, value.encode()) == []

    # the cache keys the step by a salted digest of each value: a changed secret runs it again
    for api_token, attempts in ((token, 0), ("other-" + secrets.token_hex(4), 1)):
        hf("run", _workflow(tmp_path), "--secrets-file", str(secrets_file), extra_env={"API_TOKEN": api_token})
        step = hf.show(hf.last_run())["steps"][0]
        assert step["attempts"] == attempts, step  # 0: taken from the cache


@pytest.mark.parametrize(
    ("env", "file_text", "named"),
    [
        pytest.param({}, None, ["'API_TOKEN'", "'DB_PASS'", "the environment"], id="neither-set"),
        pytest.param({"API_TOKEN": "t"}, "OTHER=1\n", ["'DB_PASS'", "secrets file"], id="not-in-the-file"),
        pytest.param({"API_TOKEN": "t", "DB_PASS": ""}, None, ["'DB_PASS'", "empty"], id="empty"),
    ],
)
def test_a_missing_secret_is_refused_before_the_run_is_recorded(
    tmp_path: Path, hf: Hetflow, env: dict[str, str], file_text: str | None, named: list[str]
) -> None:
    args = ["run", _workflow(tmp_path)]
    if file_text is not None:
        (tmp_path / "s.env").write_text(file_text)
        args += ["--secrets-file", str(tmp_path / "s.env")]
    proc = hf(*args, check=False, extra_env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "step 's' needs secret" in proc.stderr and all(n in proc.stderr for n in named), proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []


def test_a_resume_needs_the_secrets_again(tmp_path: Path, hf: Hetflow) -> None:
    values = {"API_TOKEN": "tok-" + secrets.token_hex(8), "DB_PASS": "pw-" + secrets.token_hex(8)}
    wf = _workflow(tmp_path, then_fail=True)
    assert hf("run", wf, check=False, extra_env=values).returncode == 1
    run_id = hf.last_run()

    refused = hf("resume", run_id, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "needs secret 'API_TOKEN'" in refused.stderr and "a resume needs them again" in refused.stderr
    assert hf.step_states(run_id) == {"s": "succeeded", "t": "failed"}  # nothing was reset

    resumed = hf("resume", run_id, check=False, extra_env=values)
    assert resumed.returncode == 1 and "re-running t" in resumed.stderr, resumed.stderr


def test_secrets_on_a_cluster_backend_are_refused_naming_them(tmp_path: Path, hf: Hetflow) -> None:
    values = {"API_TOKEN": "t", "DB_PASS": "p"}
    proc = hf("run", _workflow(tmp_path), "--backend", "slurm", "--cluster", "c.yaml", check=False, extra_env=values)
    assert proc.returncode == 2 and "secrets (API_TOKEN, DB_PASS)" in proc.stderr and "slurm" in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []


def test_validate_notes_each_secret_this_environment_lacks(tmp_path: Path, hf: Hetflow) -> None:
    proc = hf("validate", _workflow(tmp_path), extra_env={"API_TOKEN": "t"})
    notes = [line for line in proc.stderr.splitlines() if "secret" in line]
    assert notes == [
        f"{tmp_path / 'wf.yaml'}:6: note: step 's': secret 'DB_PASS' is not set here; hetflow run"
        " needs it in its environment or in --secrets-file FILE"
    ], proc.stderr
