"""Record a real-model build as a replay fixture (issue 37).

    .venv/bin/python tests/real_model/record.py NAME [--keep DIR] [--cache FILE]
    make record-real NAME=NAME
    .venv/bin/python tests/real_model/record.py NAME --refresh   # no model: see refresh()
    .venv/bin/python tests/real_model/record.py NAME --prune     # no model: see prune()

Runs `prb demo --local --config <its config>` on the real local model (the 1.5B by default:
`make demo-local` installs it) into a fresh outputs folder, then writes
`tests/real_model/NAME.json.gz`: every response the build used (its response cache, with the
requests that failed: cut off, unparseable), and what
the replay test holds it to — the prompt refs, the release's file hashes, its funnel, its
probe figures and the judge's qualification. `tests/test_real_replay.py` rebuilds the release
offline from the fixture, with no model running. Takes what the build takes (hours for the
60-pair builds on 2 cores); the fixture is small (the model's text, gzipped).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
# name -> the config it builds (a file under configs/)
RECORDINGS = {
    "demo-local": "configs/local.yaml",
    "real-default": "configs/real-default.yaml",
    "real-instructed": "configs/real-instructed.yaml",
    "real-planned": "configs/real-planned.yaml",
    "real-fit": "configs/real-fit.yaml",
}


def fixture_path(name: str) -> Path:
    return HERE / f"{name}.json.gz"


# fixture file name -> the SHA-256 of its JSON as recorded: a fixture proves itself against it
# (a response edited by hand, re-gzipped, replayed as if the model wrote it), and a new
# recording or a refresh is the only writer of both
DIGESTS = HERE / "digests.json"


class FixtureError(Exception):
    """A fixture that is not what was recorded: edited, damaged or unknown."""


def digests() -> dict[str, str]:
    return json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}


def write_fixture(path: Path, data: dict) -> None:
    raw = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
        gz.write(raw)
    table = digests() | {path.name: hashlib.sha256(raw).hexdigest()}
    DIGESTS.write_text(json.dumps(dict(sorted(table.items())), indent=2) + "\n")


def read_fixture(path: Path) -> dict:
    """The fixture's data, once its content hash is the one recorded in digests.json."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:  # BadGzipFile is an OSError
        raise FixtureError(f"{path}: not a readable fixture ({type(e).__name__}: {e})") from None
    want = digests().get(path.name)
    found = hashlib.sha256(raw).hexdigest()
    if want != found:
        raise FixtureError(
            f"{path}: its content (sha256 {found[:12]}) is not what was recorded "
            f"({(want or 'none')[:12]} in {DIGESTS.name}): record it again on the model "
            f"(`make record-real NAME={path.name.removesuffix('.json.gz')}`), never by hand"
        )
    return json.loads(raw)


def config_for(name: str, outputs: Path) -> Path:
    """The recording's config with its outputs folder: the one thing a replay changes too."""
    data = yaml.safe_load((REPO / RECORDINGS[name]).read_text())
    data["outputs_dir"] = str(outputs)
    path = outputs.parent / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def file_hashes(release: Path) -> dict[str, str]:
    from pipeline.store import sha256_file

    return {
        str(p.relative_to(release)): sha256_file(p)
        for p in sorted(release.rglob("*"))
        if p.is_file()
    }


DEAD = "http://127.0.0.1:9/v1"  # nothing listens: a replay that needs a new response fails


def replay_config(name: str, fixture: dict, outputs: Path) -> Path:
    """The recording's config, answered from the fixture's responses alone (`model.replay`),
    with its response cache filled from the fixture: no model runs."""
    from pipeline.llm import local
    from pipeline.llm.cache import ResponseCache

    cache = ResponseCache(outputs / "cache.sqlite")
    cache.add_rows(fixture["responses"])
    cache.add_failure_rows(fixture["failures"])  # answers cut off at max_tokens, and the like
    cache.close()
    config = config_for(name, outputs)
    data = yaml.safe_load(config.read_text())
    alias = fixture["models"]["generator"]
    for key, value in local.overrides(DEAD, alias, fixture["weights_sha256"]).items():
        *parents, leaf = key.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    data["model"]["replay"] = True
    config.write_text(yaml.safe_dump(data))
    return config


def refresh(name: str, keep: Path | None = None) -> None:
    """What prb makes of the recorded text, made again by today's code: the release's hashes,
    funnel, probe figures and qualification, from the fixture's responses alone (seconds, no
    model; a prompt changed since the recording needs a real re-recording instead). `keep`:
    build there and leave the run to read."""
    fixture = read_fixture(fixture_path(name))
    with tempfile.TemporaryDirectory(prefix=f"prb-refresh-{name}-") as tmp:
        outputs = (keep.resolve() if keep else Path(tmp)) / "outputs"
        outputs.mkdir(parents=True, exist_ok=True)
        config = replay_config(name, fixture, outputs)
        command = [sys.executable, "-m", "pipeline.cli", "build", "--config", str(config)]
        run = subprocess.run(command, cwd=REPO)
        if run.returncode != 0:
            sys.exit(
                f"the replay exited {run.returncode}: nothing refreshed (a prompt changed? "
                f"record it again on the model: `make record-real NAME={name}`)"
            )
        # the config's run id: a recording renamed (real-instructed -> real-planned) takes it
        run_id = yaml.safe_load((REPO / RECORDINGS[name]).read_text())["run_id"]
        release = outputs / run_id / "release"
        manifest = json.loads((release / "manifest.json").read_text())
        fixture.update(
            run_id=run_id,
            files=file_hashes(release),
            funnel=manifest["funnel"],
            validity=manifest["validity"],
            judge_qualification=manifest["judge_qualification"],
        )
    write_fixture(fixture_path(name), fixture)
    print(f"refreshed {name}: {manifest['funnel'][-1]['count']} pairs released")


def asked(name: str, fixture: dict) -> set[str]:
    """The keys of the responses (and failures) a replay of the fixture asks for, the
    release checked to be the recorded one. A recording started from an earlier build's
    cache (`--cache`) holds that cache's every answer, most of which it never asked: they
    would pass for its own calls (`bench/real_builds.py` counts the fixture's responses)."""
    import os

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    from pipeline.llm.cache import ResponseCache
    from pipeline.run.flow import build

    seen: set[str] = set()
    get, failure = ResponseCache.get, ResponseCache.failure

    def traced_get(self, key):  # the build's own cache reads, counted in this process
        seen.add(key)
        return get(self, key)

    def traced_failure(self, key):
        seen.add(key)
        return failure(self, key)

    ResponseCache.get, ResponseCache.failure = traced_get, traced_failure
    try:
        with tempfile.TemporaryDirectory(prefix=f"prb-prune-{name}-") as tmp:
            outputs = Path(tmp) / "outputs"
            outputs.mkdir()
            result = asyncio.run(build(str(replay_config(name, fixture, outputs)), {}))
            if file_hashes(Path(result["release_dir"])) != fixture["files"]:
                raise FixtureError(f"{name}: the replay is not the recorded release")
    finally:
        ResponseCache.get, ResponseCache.failure = get, failure
    return seen


def pruned(name: str, fixture: dict) -> dict:
    """The fixture with only the responses and failures its build asks for."""
    keys = asked(name, fixture)
    return fixture | {
        "responses": [r for r in fixture["responses"] if r["key"] in keys],
        "failures": [r for r in fixture["failures"] if r["key"] in keys],
    }


def prune(name: str) -> None:
    """No model: drop from a fixture the responses its build never asks for (recorded from
    an earlier cache before recordings were pruned), the release unchanged."""
    fixture = read_fixture(fixture_path(name))
    kept = pruned(name, fixture)
    write_fixture(fixture_path(name), kept)
    print(
        f"pruned {name}: kept {len(kept['responses'])} of {len(fixture['responses'])} "
        f"responses, {len(kept['failures'])} of {len(fixture['failures'])} failures"
    )


def main() -> None:
    import argparse

    from pipeline.llm.cache import ResponseCache

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", choices=RECORDINGS)
    ap.add_argument("--keep", type=Path, help="build in this folder and leave it there to read")
    ap.add_argument(
        "--cache",
        type=Path,
        help="start from this response cache (an earlier "
        "recording's outputs/cache.sqlite): only what changed is asked again",
    )
    ap.add_argument(
        "--refresh",
        action="store_true",
        help="no model: rebuild from the fixture's own responses and record what today's "
        "code makes of them",
    )
    ap.add_argument(
        "--prune",
        action="store_true",
        help="no model: keep only the responses the fixture's build asks for",
    )
    args = ap.parse_args()
    name = args.name
    if args.prune:
        try:
            return prune(name)
        except FixtureError as e:
            sys.exit(str(e))
    if args.refresh:
        try:
            return refresh(name, args.keep)
        except FixtureError as e:  # --refresh never takes an edited fixture as the new truth
            sys.exit(str(e))
    with tempfile.TemporaryDirectory(prefix=f"prb-record-{name}-") as tmp:
        outputs = (args.keep.resolve() if args.keep else Path(tmp)) / "outputs"
        outputs.mkdir(parents=True, exist_ok=True)
        if args.cache:
            shutil.copyfile(args.cache, outputs / "cache.sqlite")
        config = config_for(name, outputs)
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "demo", "--local", "--config", str(config)],
            cwd=REPO,
        )
        wall = time.monotonic() - started
        if run.returncode != 0:
            sys.exit(f"the build exited {run.returncode}: nothing recorded")
        run_id = yaml.safe_load(config.read_text())["run_id"]
        release = outputs / run_id / "release"
        manifest = json.loads((release / "manifest.json").read_text())
        stats = json.loads((outputs / run_id / "run_stats.json").read_text())
        cache = ResponseCache(outputs / "cache.sqlite")
        rows, failures = cache.rows(), cache.failure_rows()
        cache.close()
    data = {
        "name": name,
        "config": RECORDINGS[name],
        "run_id": run_id,
        "models": manifest["models"],
        "weights_sha256": manifest["config"]["model"]["weights_sha256"],
        "prompts": {t: p["ref"] for t, p in manifest["prompts"].items()},
        "files": file_hashes(release),
        "funnel": manifest["funnel"],
        "validity": manifest["validity"],
        "judge_qualification": manifest["judge_qualification"],
        "usage": stats["usage"],
        "wall_s": round(wall),
        "responses": rows,
        "failures": failures,
    }
    if args.cache:  # the earlier build's answers this one never asked stay out
        data = pruned(name, data)
    write_fixture(fixture_path(name), data)
    size = fixture_path(name).stat().st_size
    print(
        f"recorded {name}: {len(data['responses'])} responses, "
        f"{manifest['funnel'][-1]['count']} pairs released, "
        f"build {wall / 60:.1f} min, fixture {size / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    main()
