"""Crash safety: a real `prb build` killed with SIGKILL mid-stage, again and again, then resumed,
gives the release of an uninterrupted run byte for byte, with nothing redone or duplicated.

Helpers here (start/kill a `prb build` subprocess) are shared with the other issue-9 tests.
Each subprocess runs in its own session, so killing its group leaves no orphan; it talks to the
session's Prefect test server (PREFECT_API_URL) rather than starting its own temporary one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from conftest import PRB, build, prefect_env, write_config

STAGE_IDS = {  # stage file -> how a record's identity is read
    "rubrics": lambda r: r["task"]["task_id"],
    "pairs": lambda r: r["task"]["task_id"],
    "filters": lambda r: r["pair"]["pair_id"],
}


def start_build(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [str(PRB), "build", *args],
        env=env or prefect_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: killpg reaps any helper it started
    )


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    proc.wait(30)


def run_prb(*args: str, env: dict | None = None, timeout: float = 180) -> tuple[int, str]:
    """Run `prb build ARGS` to the end: (exit code, stdout + stderr)."""
    proc = start_build(*args, env=env)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc)
    return proc.returncode, out.decode("utf-8", "replace")


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def kill_when(args: list[str], stage_file: Path, n: int, timeout: float = 120) -> str:
    """Start a build and SIGKILL it once `stage_file` has `n` complete records."""
    proc = start_build(*args)
    deadline = time.monotonic() + timeout
    try:
        while lines(stage_file) < n:
            assert proc.poll() is None, f"build ended before {stage_file.name} had {n} lines"
            assert time.monotonic() < deadline, f"{stage_file.name} never reached {n} lines"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        kill_group(proc)
        out = proc.stdout.read().decode("utf-8", "replace")
    assert proc.returncode == -signal.SIGKILL, out
    return out


def tree_hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_sigkill_at_every_model_stage_then_resume_gives_the_same_release(tmp_path, sim_factory):
    # latency and 2-way concurrency make each model stage last long enough to be caught midway
    url = sim_factory(latency_ms=120)
    config = write_config(
        tmp_path, url, run_id="crash", personas={"per_category": 2}, model={"concurrency": 2}
    )
    outputs = tmp_path / "outputs"
    run_dir = outputs / "crash"

    # the uninterrupted reference, in the same place; then start again from nothing
    uninterrupted = build(config)
    reference = tree_hashes(run_dir / "release")
    reference_manifest = json.loads((run_dir / "release" / "manifest.json").read_text())
    shutil.rmtree(outputs)

    args = ["--config", str(config), "--run-id", "crash"]
    kill_when(args, run_dir / "rubrics.jsonl", 2)
    assert (run_dir / "run.lock.json").exists()  # the killed run could not clean up
    out = kill_when(args, run_dir / "pairs.jsonl", 2)
    assert "taking over a stale lock" in out
    kill_when(args, run_dir / "filters.jsonl", 3)

    # what a kill in the middle of a write leaves: a torn last line, temp files, a half release
    with open(run_dir / "filters.jsonl", "ab") as f:
        f.write(b'{"pair": {"pair_id": "prb-torn')
    (run_dir / ".pairs.jsonl.x1y2.tmp").write_text("half")
    (run_dir / ".release-abc123").mkdir()
    done_before = {
        stage: (run_dir / f"{stage}.jsonl").read_bytes().rsplit(b"\n", 1)[0] for stage in STAGE_IDS
    }

    code, out = run_prb(*args)
    assert code == 0, out
    assert "dropped a torn last line" in out
    assert json.loads((run_dir / "release" / "manifest.json").read_text()) == reference_manifest
    assert tree_hashes(run_dir / "release") == reference
    for stage, ident in STAGE_IDS.items():
        data = (run_dir / f"{stage}.jsonl").read_bytes()
        assert data.startswith(done_before[stage])  # finished records were kept, not redone
        ids = [ident(json.loads(line)) for line in data.splitlines()]
        assert len(ids) == len(set(ids)), f"duplicate records in {stage}.jsonl"
    assert not list(run_dir.glob(".*")), "leftovers of the interrupted runs remain"
    assert not (run_dir / "run.lock.json").exists()
    stats = json.loads((run_dir / "run_stats.json").read_text())
    # the resumed run asked only for what the killed runs had not finished
    sent = sum(u["calls"] for u in stats["usage"].values())
    assert 0 < sent < sum(u["calls"] for u in uninterrupted["usage"].values())
