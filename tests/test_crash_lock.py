"""One run per run directory (a lock naming its holder), and no resume under changed settings
(a fingerprint of config and prompts, overridden only by --force-new-run)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap

import pytest
from conftest import build, write_config
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import NothingReleased
from pipeline.run.rundir import FingerprintError, RunLock, RunLockedError

HOLD = textwrap.dedent(
    """
    import sys, time
    from pipeline.run.rundir import RunLock
    RunLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
    """
)


@contextlib.contextmanager
def holding(run_dir):
    """Another process holding the run's lock (it has said so) until the block ends; killed,
    so its lock is left stale."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_a_second_run_on_a_locked_run_dir_refuses_naming_the_holder(tmp_path, sim_url):
    config = write_config(tmp_path, sim_url, personas={"per_category": 2})
    run_dir = tmp_path / "outputs" / "demo"
    with holding(run_dir) as holder:
        with pytest.raises(RunLockedError, match=rf"in use by another prb run \(pid {holder.pid} "):
            build(config)
        result = CliRunner().invoke(app, ["build", "--config", str(config)])
        assert result.exit_code == 3
        assert f"pid {holder.pid} on" in result.output and "started 20" in result.output
        assert not (run_dir / "rubrics.jsonl").exists()  # the refused run touched nothing
    # the holder died without releasing: its lock is stale and the next run takes it over
    assert json.loads((run_dir / "run.lock.json").read_text())["pid"] == holder.pid
    result = build(config)
    assert result["funnel"]["released"] > 0
    assert not (run_dir / "run.lock.json").exists()


def test_lock_is_exclusive_and_released(tmp_path):
    with RunLock(tmp_path / "r") as lock:
        assert json.loads(lock.info.read_text())["pid"] > 0
        with pytest.raises(RunLockedError):
            RunLock(tmp_path / "r").acquire()
    with RunLock(tmp_path / "r"):
        pass


def test_changed_settings_refuse_to_resume_unless_forced(tmp_path, sim_url):
    small = {"per_category": 2}
    config = write_config(tmp_path, sim_url, personas=small)
    first = build(config)
    run_dir = tmp_path / "outputs" / "demo"
    saved = json.loads((run_dir / "fingerprint.json").read_text())
    assert "prompts.planner" in saved["inputs"] and "model.judge" in saved["inputs"]
    assert "model.concurrency" not in saved["inputs"]  # operational knobs may change

    # operational knobs do not block a resume, nor do sections every build recomputes
    build(config, model__concurrency=1, model__timeout_s=30.0)
    with pytest.raises(NothingReleased, match="no kept pair has a confirmed human verdict"):
        build(config, annotation__required=True, release__license="cc-by-sa-4.0")

    changed = write_config(tmp_path, sim_url, personas=small, filters={"min_quality": 4.5})
    before = (run_dir / "filters.jsonl").read_bytes()
    with pytest.raises(FingerprintError, match=r"filters\.min_quality: 3\.5 -> 4\.5"):
        build(changed)
    assert (run_dir / "filters.jsonl").read_bytes() == before
    result = CliRunner().invoke(app, ["build", "--config", str(changed)])
    assert result.exit_code == 2 and "--force-new-run" in result.output

    result = CliRunner().invoke(app, ["build", "--config", str(changed), "--force-new-run"])
    assert result.exit_code == 0, result.output
    aside = tmp_path / "outputs" / "demo.old-1"
    assert (aside / "filters.jsonl").read_bytes() == before  # the old run, kept whole
    assert not (aside / "run.lock.json").exists()
    assert (
        json.loads((run_dir / "fingerprint.json").read_text())["inputs"]["filters.min_quality"]
        == 4.5
    )
    assert first["funnel"]["pairs"] == 6


def test_a_demo_of_a_run_being_built_is_refused_before_its_server_starts(tmp_path, sim_url):
    """`prb demo` started the simulator (or the local model: minutes) before the run's lock
    said no, ~25 s later (issue 48): the lock is asked first now, and no server starts."""
    config = write_config(tmp_path, sim_url)
    run_dir = tmp_path / "outputs" / "demo"
    with RunLock(run_dir):
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "demo", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 3, done.stderr
    assert "in use by another prb run" in done.stderr
    assert "prb simulator on" not in done.stdout + done.stderr
