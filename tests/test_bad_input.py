"""Bad input: each kind stops the build with a clear error naming the file (and line or field)
before any model call, and a finished run of the same id is left exactly as it was."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import httpx
import pytest
from conftest import REPO, build, write_config
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import ConfigError
from pipeline.llm.prompts import PromptError
from pipeline.personas.files import PersonaFileError


def sim_requests(sim_url: str) -> int:
    return httpx.get(sim_url.removesuffix("/v1") + "/stats").json().get("requests", 0)


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory, sim_url):
    """A finished run over a private copy of the persona library: (config, run dir, library)."""
    tmp = tmp_path_factory.mktemp("finished")
    library = tmp / "library"
    shutil.copytree(REPO / "personas" / "library", library)
    config = write_config(
        tmp, sim_url, run_id="done", personas={"per_category": 2, "library": [str(library)]}
    )
    build(config)
    return config, tmp / "outputs" / "done", library


@pytest.fixture
def intact(finished, sim_url):
    """Asserts, after the test, that the finished run is unchanged and no model was called."""
    config, run_dir, _ = finished
    before, calls = snapshot(run_dir), sim_requests(sim_url)
    yield finished
    assert snapshot(run_dir) == before
    assert sim_requests(sim_url) == calls


def test_malformed_yaml_config(tmp_path, intact):
    config, _, _ = intact
    bad = tmp_path / "bad.yaml"
    bad.write_text(config.read_text() + "filters: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: malformed YAML"):
        build(bad)
    result = CliRunner().invoke(app, ["build", "--config", str(bad)])
    assert result.exit_code == 2
    assert "bad.yaml: malformed YAML" in result.output


def test_unknown_config_key(tmp_path, intact):
    config, _, _ = intact
    bad = tmp_path / "typo.yaml"
    text = config.read_text().replace("simulated: true", "simulated: true\nsimulatd: 1")
    bad.write_text(text + "filters:\n  min_qualty: 4.0\n")
    with pytest.raises(ConfigError, match=r"typo\.yaml: invalid config: .*filters\.min_qualty"):
        build(bad)
    result = CliRunner().invoke(app, ["build", "--config", str(bad)])
    assert result.exit_code == 2 and "simulatd: Extra inputs are not permitted" in result.output


def test_non_utf8_config(tmp_path, intact):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("run_id: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: cannot read config"):
        build(bad)


def broken(path: Path, line: int, replacement: bytes):
    """Replace line `line` (1-based) of a JSONL file; returns a restore function."""
    original = path.read_bytes()
    rows = original.split(b"\n")
    rows[line - 1] = replacement
    path.write_bytes(b"\n".join(rows))
    return lambda: path.write_bytes(original)


@pytest.mark.parametrize(
    "kind, replacement, message",
    [
        ("broken_json", b'{"persona_id": "x", "profile": [', r"\.jsonl:3: broken JSON"),
        ("non_utf8", '{"name": "Ren\xe9e"}'.encode("latin-1"), r"\.jsonl:\d+: not UTF-8 text"),
        ("wrong_field", b'{"persona_id": "x", "category": "Nope"}', r"\.jsonl:3: record 'x'"),
    ],
)
def test_bad_persona_file(kind, replacement, message, intact):
    config, _, library = intact
    restore = broken(sorted(library.glob("*.jsonl"))[0], 3, replacement)
    try:
        with pytest.raises(PersonaFileError, match=message):
            build(config)
        result = CliRunner().invoke(app, ["build", "--config", str(config)])
        assert result.exit_code == 2
        # one line, no traceback: the file, the record and what to do
        assert result.output.startswith("error: ") and result.output.count("\n") == 1
        assert ".jsonl" in result.output and "prb personas validate" in result.output
    finally:
        restore()


def test_empty_library(tmp_path, sim_url):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "none.jsonl").write_text("\n")
    config = write_config(tmp_path, sim_url, personas={"library": [str(empty)]})
    calls = sim_requests(sim_url)
    with pytest.raises(PersonaFileError, match="no personas found in .*empty"):
        build(config)
    assert sim_requests(sim_url) == calls


@pytest.fixture
def prompts_copy(tmp_path, monkeypatch):
    """A private copy of prompts/ that the build reads instead of the real one."""
    import pipeline.llm.prompts as P

    prompts = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    monkeypatch.setattr(P, "PROMPTS_DIR", prompts)
    monkeypatch.setattr(P.load_prompt, "__defaults__", (prompts,))
    monkeypatch.setattr(P.all_prompts, "__defaults__", (prompts,))
    return prompts


def test_prompt_with_a_missing_variable_fails_before_the_first_call(prompts_copy, intact):
    # the quality judge runs last: the error must still come before the planner's first call
    config, _, _ = intact
    path = prompts_copy / "judge_quality.yaml"
    path.write_text(path.read_text().replace("{{ question }}", "{{ question }} {{ user_mood }}"))
    missing = r"judge_quality\.yaml: template variable missing: .*user_mood"
    with pytest.raises(PromptError, match=missing):
        build(config)


def test_unparseable_prompt_file(prompts_copy, intact):
    config, _, _ = intact
    (prompts_copy / "planner.yaml").write_text("task: planner\nsystem: [oops\n")
    with pytest.raises(PromptError, match=r"planner\.yaml: cannot load prompt"):
        build(config)


def test_unknown_rejection_strategy(tmp_path, sim_url):
    config = write_config(tmp_path, sim_url, generation={"strategies": ["be_rude"]})
    calls = sim_requests(sim_url)
    with pytest.raises(PromptError, match=r"rejected\.yaml: .*\['be_rude'\]"):
        build(config)
    assert sim_requests(sim_url) == calls
