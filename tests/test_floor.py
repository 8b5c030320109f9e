"""The model-free quality floor's first check (issue 26): degenerate text — too short, repeated
lines, a looping phrase — dropped before any judge is asked, so it costs no judge call."""

from __future__ import annotations

from pathlib import Path

from conftest import build, write_config
from public_releases import controlled

from pipeline.checks import CHECKS
from pipeline.checks.degenerate import Settings, side, why
from pipeline.records import FilterRecord
from pipeline.store import StageFile

JUDGES = {c.name for c in CHECKS if c.cost > 0}


def test_degenerate_answers_are_named_and_sound_prose_is_not():
    cfg = Settings()
    assert why(side("Short answer."), cfg) == ["too short"]
    repeated = "Keep the budget small.\n" * 5 + "Start with one lesson a week."
    assert why(side(repeated), cfg) == ["repeated lines", "looping"]
    assert why(side("the cat sat on the mat " * 20), cfg) == ["looping"]
    for row in controlled(couples=20):  # prose, lists, formal and casual answers: all sound
        assert why(side(row["chosen"]), cfg) == [] and why(side(row["rejected"]), cfg) == []


def test_planted_degenerate_answers_are_all_dropped_with_no_judge_call(tmp_path, sim_factory,
                                                                        sim_url):  # fmt: skip
    url = sim_factory(degenerate_rate=0.3)
    result = build(write_config(tmp_path / "bad", url, personas={"per_category": 4}))
    records = list(StageFile(Path(result["run_dir"]), "filters", FilterRecord).read())
    planted = [r for r in records if len(set(r.pair.rejected.splitlines())) == 1
               and len(r.pair.rejected.splitlines()) == 6]  # fmt: skip
    assert planted and len(planted) < len(records)
    for r in planted:
        assert "degenerate" in r.reasons and not r.kept
        assert not JUDGES & set(r.checks) and not r.calls  # no judge was asked
    assert all("degenerate" not in r.reasons for r in records if r not in planted)
    sound = build(write_config(tmp_path / "ok", sim_url, personas={"per_category": 4}))
    kept = list(StageFile(Path(sound["run_dir"]), "filters", FilterRecord).read())
    assert all("degenerate" not in r.reasons for r in kept)
