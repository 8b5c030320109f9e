"""`prb personas expand` against the simulator over real HTTP: candidates aimed at
under-covered levels, vetted, written for review and never into the library."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

from conftest import write_config
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.personas.checks import parse_paths, validate
from pipeline.personas.expand import Plan, vet
from pipeline.personas.files import load_personas, load_taxonomy
from pipeline.records import Persona

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "personas" / "library"
QUESTIONS = REPO / "personas" / "questions"
TAX = load_taxonomy()
runner = CliRunner()


def library_digest() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(LIBRARY.iterdir()))).hexdigest()


def expand(config: Path, *args: str):
    return runner.invoke(app, ["personas", "expand", "--config", str(config), *args])


def test_expand_writes_vetted_candidates_for_review(tmp_path, sim_url):
    before = library_digest()
    config = write_config(tmp_path / "a", sim_url)
    result = expand(config, "--n", "6", "--name", "batch1", "--seed", "3")
    assert result.exit_code == 0, result.output
    out = tmp_path / "a" / "outputs" / "persona_candidates" / "batch1.jsonl"
    assert f"6 of 6 candidates written to {out}" in result.output.replace("\n", "")
    candidates = [Persona.model_validate_json(line) for line in out.read_text().splitlines()]
    assert len({p.persona_id for p in candidates}) == 6
    assert all(p.source == "expand" and len(p.profile) >= 5 for p in candidates)
    assert Counter(p.category for p in candidates) == Counter(
        {c: 2 for c in {p.category for p in candidates}}
    )
    assert library_digest() == before  # the library is never written

    # the candidates pass the library's own checks together with the library
    report = validate([LIBRARY, QUESTIONS, out], TAX)
    assert report.errors == [], [str(i) for i in report.errors]

    # the first candidate of a category aims at its least-covered dimension's rarest level
    library = load_personas([LIBRARY])
    first = candidates[0]
    counts = Counter(
        (x.dimension, x.level)
        for p in library
        if p.category == first.category
        for x in p.preferences
    )
    dim_total = {d: sum(counts[d, lv] for lv in TAX.levels[d]) for d in TAX.dimensions}
    rarest_dims = [d for d in TAX.dimensions if dim_total[d] == min(dim_total.values())]
    held = {(x.dimension, x.level) for x in first.preferences}
    assert any(
        (d, lv) in held and counts[d, lv] == min(counts[d, v] for v in TAX.levels[d])
        for d in rarest_dims
        for lv in TAX.levels[d]
    ), held

    # same seed, fresh outputs (no shared cache): the same candidates
    again = write_config(tmp_path / "b", sim_url)
    assert expand(again, "--n", "6", "--name", "batch1", "--seed", "3").exit_code == 0
    twin = tmp_path / "b" / "outputs" / "persona_candidates" / "batch1.jsonl"
    assert twin.read_bytes() == out.read_bytes()
    # another seed: other people
    assert expand(again, "--n", "6", "--name", "batch2", "--seed", "4").exit_code == 0
    other = (twin.parent / "batch2.jsonl").read_text().splitlines()
    assert set(other).isdisjoint(out.read_text().splitlines())

    # a reviewed file goes in with `prb personas add` (here into a copy of the library)
    lib, qs = tmp_path / "lib", tmp_path / "qs"
    shutil.copytree(LIBRARY, lib)
    shutil.copytree(QUESTIONS, qs)
    added = runner.invoke(
        app, ["personas", "add", str(out), "--library", str(lib), "--questions", str(qs)]
    )
    assert added.exit_code == 0, added.output
    assert len(load_personas([lib])) == len(library) + 6


def test_expand_refuses_to_write_into_the_library_or_over_a_review_file(tmp_path, sim_url):
    before = library_digest()
    config = write_config(tmp_path, sim_url)
    result = expand(config, "--n", "1", "--out", str(LIBRARY / "new.jsonl"))
    assert result.exit_code == 2 and "not into the library" in result.output
    assert library_digest() == before

    assert expand(config, "--n", "1", "--name", "x").exit_code == 0
    result = expand(config, "--n", "1", "--name", "x")
    assert result.exit_code == 2 and "never overwrite" in result.output


def test_vet_rejects_near_duplicates_and_missed_targets():
    entries, _ = parse_paths([LIBRARY])
    known = [e for e in entries if isinstance(e.record, Persona)]
    copy = known[0].record.model_copy(update={"persona_id": "ae-xcopy"})
    copy.profile = [
        i.model_copy(update={"id": f"ae-xcopy-p{k}"}) for k, i in enumerate(copy.profile)
    ]
    held = {x.dimension for x in copy.preferences}
    missing = next(d for d in TAX.dimensions if d not in held)
    level = next(iter(TAX.levels[missing]))
    plan = Plan(0, copy.category, [{"dimension": missing, "level": level, "description": ""}], [])
    reasons = vet(copy, plan, known, TAX)
    assert any(f"near-duplicate of persona {known[0].id!r}" in r for r in reasons), reasons
    assert f"preferences: target {missing}={level} missing" in reasons


def test_expand_writes_failed_calls_to_the_rejected_file(tmp_path, sim_factory):
    url = sim_factory(rate_malformed=1.0)
    config = write_config(tmp_path, url, model={"max_retries": 0})
    result = expand(config, "--n", "2", "--name", "bad")
    assert result.exit_code == 1
    folder = tmp_path / "outputs" / "persona_candidates"
    assert (folder / "bad.jsonl").read_text() == ""
    rejected = [json.loads(line) for line in (folder / "bad.rejected.jsonl").open()]
    # two per round, three rounds: every attempt is written down with its reason
    assert [r["index"] for r in rejected] == list(range(6))
    # the simulator cuts each answer off (finish_reason "length"): recorded as such
    assert all("model call: cut_off" in r["reasons"][0] for r in rejected)
