"""Plugins (issue 27): another package adds a reward model, a probe, a check, a persona source
or a rejected strategy through entry points (`prb.<kind>`), with no prb file changed. The test
builds a tiny plugin package, installs it (pip, not editable) into a folder of its own that only
the commands run here see, and finds its reward model in `prb eval --help` and in a run, and its
probe in `prb audit`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import prefect_env
from public_releases import controlled

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "prb-plugin-demo"
version = "0.1.0"

[tool.setuptools]
py-modules = ["prb_plugin_demo"]

[project.entry-points."prb.reward_models"]
shortest = "prb_plugin_demo:KIND"

[project.entry-points."prb.probes"]
questions = "prb_plugin_demo:PROBE"
"""
MODULE = '''"""A reward model and a probe from outside prb."""

from pipeline.probes.base import ProbeSpec, more_wins, rule
from pipeline.eval.models import Kind
from pipeline.eval.rewards import RewardModel


class ShortestRM(RewardModel):
    batched = True

    async def score_many(self, queries):
        return [-float(len(q.response.split())) for q in queries]


KIND = Kind("shortest", "plugin: the shorter answer wins", "prb_plugin_demo:ShortestRM")


def questions(rows, seed=0):
    scores = [more_wins(r["chosen"].count("?"), r["rejected"].count("?")) for r in rows]
    return [rule("cue: question marks", "the answer asking more questions wins", scores, seed)]


PROBE = ProbeSpec("questions", "leakage", 25, questions, "more question marks win")
'''


def flat(help_text: str) -> str:
    """Help text as one line: rich wraps it inside a box."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", help_text).split())


def test_a_plugin_package_adds_a_reward_model_and_a_probe(tmp_path):
    pkg = tmp_path / "plugin"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "prb_plugin_demo.py").write_text(MODULE)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(pkg),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = prefect_env(PYTHONPATH=str(target))

    def prb(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    helped = prb("eval", "score", "--help")
    assert helped.returncode == 0 and "plugin: the shorter answer wins" in flat(helped.stdout)
    release = tmp_path / "r.jsonl"
    release.write_text("\n".join(json.dumps(r) for r in controlled()))
    done = prb(
        "eval",
        str(release),
        "--rm",
        "shortest",
        "--rm",
        "length",
        "--bootstrap",
        "20",
        "--out",
        str(tmp_path / "eval"),
    )
    assert done.returncode == 0, done.stderr
    board = (tmp_path / "eval" / "leaderboard.csv").read_text()
    assert "shortest/profile" in board and "length/profile" in board
    done = prb("audit", str(release), "--out", str(tmp_path / "audit"))
    assert done.returncode == 0, done.stderr
    names = [
        p["name"]
        for p in json.loads((tmp_path / "audit" / "audit.json").read_text())["probes"]["probes"]
    ]
    assert "cue: question marks" in names
    without = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "eval", "score", "--help"],
        env=prefect_env(),
        capture_output=True,
        text=True,
    )
    assert "shorter answer wins" not in flat(without.stdout)  # nothing of it outside that folder
    assert not list(Path(sys.prefix).glob("lib/*/site-packages/prb_plugin_demo*"))
