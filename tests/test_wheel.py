"""An installed wheel runs (issue 27): `pip install` of the built wheel (not editable) into a
fresh venv, then `prb demo` from a folder outside the checkout builds the demo, finding the
bundled prompts, configs, personas and templates through importlib.resources. The new venv
borrows the test venv's dependencies through a .pth file (no registry needed), while `pipeline`
itself comes from the wheel."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from conftest import REPO


def test_the_wheel_builds_the_demo_from_another_folder(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("prb-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "prb-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import pipeline.paths as p; print(p.IN_CHECKOUT, p.DATA)"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where[0] == "False" and where[1].startswith(site)  # the wheel's copy, not the checkout
    env = {
        "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
    }
    (tmp_path / "prefect").mkdir()
    done = subprocess.run(
        [str(env_dir / "bin" / "prb"), "demo"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    release = elsewhere / "outputs" / "demo" / "release"
    manifest = json.loads((release / "manifest.json").read_text())
    assert sum(manifest["per_category"].values()) > 0 and manifest["simulated"]
    assert set(manifest["prompts"]) >= {"planner", "chosen", "rejected", "judge_quality"}
    assert (release / "README.md").read_text().startswith("---")
