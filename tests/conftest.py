"""Shared fixtures: one Prefect server and one simulator per test session, real HTTP throughout."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

# isolate Prefect's state before anything imports it; its parent folder must exist
_PREFECT_HOME = Path(tempfile.mkdtemp(prefix="prb-prefect-"))
os.environ["PREFECT_HOME"] = str(_PREFECT_HOME)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
# datasets caches a local folder under its name and config, not its content: two releases at
# the same relative layout would share (stale) cache entries across test sessions
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="prb-hf-datasets-")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "configs" / "demo.yaml"
PRB = Path(sys.executable).with_name("prb")  # the console script, as a user runs it


def prefect_env(**extra: str) -> dict[str, str]:
    """The environment a `prb` subprocess gets: this one, on the session's Prefect server."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, **extra}
    url = PREFECT_API_URL.value()  # the session's prefect_test_harness server
    if url:
        env["PREFECT_API_URL"] = url
    return env


def prb(*args: str, env: dict | None = None, timeout: float = 300, **popen):
    """Run `prb ARGS` to the end (this interpreter's `-m pipeline.cli`, so a tree copied with
    `checkout_copy` and its cwd run their own code): a CompletedProcess, text stdout/stderr."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        env=env or prefect_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        **popen,
    )


def answering(proc: subprocess.Popen, url: str, seconds: float = 60) -> None:
    """Wait until the server `proc` started answers 200 on `url`; fail if it exits or takes
    longer than `seconds`."""
    import time

    import httpx

    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)


def ask_in_background(url: str, body: dict, timeout: float = 120):
    """POST `body` to `url` from a thread (a request in flight while a test stops the server):
    the started thread, and the list its response (or httpx error) lands in."""
    import threading

    import httpx

    answers: list = []

    def ask() -> None:
        try:
            answers.append(httpx.post(url, json=body, timeout=timeout))
        except httpx.HTTPError as e:
            answers.append(e)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    return asking, answers


@pytest.fixture(scope="session", autouse=True)
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def sim_url():
    """A fault-free simulator shared by the session."""
    from pipeline.sim.server import running

    with running() as url:
        yield url


@pytest.fixture
def sim_factory():
    """Start simulators with options (faults, latency) for one test; stopped after it."""
    from contextlib import ExitStack

    from pipeline.sim.server import running

    with ExitStack() as stack:
        yield lambda **opts: stack.enter_context(running(**opts))


def checkout_copy(tree: Path) -> Path:
    """A copy of the project's checkout at `tree`: there prb resolves relative paths and writes
    its outputs/ against the copy (`python -m pipeline.cli` run in it is the copy's prb)."""
    for part in ("pipeline", "prompts", "personas", "configs", "annotation"):
        shutil.copytree(REPO / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(REPO / "pyproject.toml", tree / "pyproject.toml")  # a checkout, to paths.py
    return tree


def write_config(tmp_path: Path, base_url: str, **changes) -> Path:
    """The demo config, pointed at `base_url` and writing under tmp_path; `changes` are merged
    into the YAML (nested dicts merge one level deep)."""
    data = yaml.safe_load(DEMO.read_text())
    data["outputs_dir"] = str(tmp_path / "outputs")
    data.setdefault("model", {})["base_url"] = base_url
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def build(config: Path, **overrides) -> dict:
    from pipeline.run.flow import build as build_flow

    return asyncio.run(build_flow(str(config), overrides))


@pytest.fixture
def small_config(tmp_path, sim_url):
    """A 6-persona config (2 per category) against the shared simulator."""
    return write_config(tmp_path, sim_url, personas={"per_category": 2})
