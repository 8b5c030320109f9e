"""The rewrite design (issue 46): one base answer rewritten for the user and for a contrasting
user, one concrete instruction per dimension on which they differ, each difference verified in
the text; library users' aspects are their own preference statements (no planner call)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config

from pipeline.realised import explanations, layout, realised
from pipeline.records import Pair, RubricRecord

STEPS = "1. Pick a brush.\n2. Wet the paper.\n3. Lay the wash."
BULLETS = "- Pick a brush.\n- Wet the paper.\n- Lay the wash."
PROSE = "Pick a brush. Wet the paper, then lay the wash."


def test_a_layout_is_read_off_the_list_markers():
    assert [layout(x) for x in (STEPS, BULLETS, PROSE)] == [
        "step_by_step",
        "bulleted_list",
        "prose",
    ]
    assert layout("1. Pick a brush.\n- Wet the paper.\n- Lay it.") == "mixed"
    assert layout("Step 1: pick.\nStep 2: wet.") == "step_by_step"


def test_each_difference_is_verified_where_the_text_shows_it():
    assert realised("format", ("step_by_step", "bulleted_list"), (STEPS, BULLETS))
    assert not realised("format", ("step_by_step", "bulleted_list"), (STEPS, STEPS))
    short, long = "Wet it. Paint.", "Wet the paper first, because the wash spreads evenly. " * 3
    assert realised("depth", ("in_depth", "brief"), (long, short))
    assert not realised("depth", ("brief", "in_depth"), (long, short))
    plain = "Practise intervals (the distance between two notes) daily, which is the basis."
    terse = "Practise intervals daily."
    assert explanations(plain) > explanations(terse) == 0
    assert realised("expertise", ("novice", "expert"), (plain, terse))
    assert not realised("expertise", ("expert", "novice"), (plain, terse))
    assert realised("tone", ("casual", "formal"), (plain, terse)) is None  # not model-free


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory, sim_url) -> Path:
    tmp = tmp_path_factory.mktemp("rewrite")
    config = write_config(
        tmp,
        sim_url,
        personas={"per_category": 8},
        rubrics={"source": "stated"},
        generation={"design": "rewrite", "word_budget": 100},
        filters={"judges": "qualified"},
    )
    return Path(build(config)["run_dir"])


def lines(path: Path, model):
    return [model.model_validate_json(x) for x in path.read_text().splitlines() if x.strip()]


def test_a_rewrite_build_contrasts_users_on_what_its_text_shows(rewritten):
    rubrics = lines(rewritten / "rubrics.jsonl", RubricRecord)
    assert rubrics and all(r.source == "stated" and r.calls == {} for r in rubrics)
    for r in rubrics:  # the user's own words, each with its dimension
        assert [a.aspect for a in r.rubric_aspects] == [
            p.statement for p in r.task.persona.preferences
        ]
    pairs = lines(rewritten / "pairs.jsonl", Pair)
    assert len(pairs) >= 6
    by_user = {p.task.persona.persona_id: p for p in pairs}
    for p in pairs:
        assert p.rejected_strategy == "persona_rewrite" and p.rejected_for
        assert set(p.calls) == {"base_answer", "chosen", "rejected"}
        assert set(p.prompt_versions) == {"base_answer", "rewrite"}
        assert p.differences and any(d.realised for d in p.differences)
        mine = {x.dimension: x.level for x in p.task.persona.preferences}
        for d in p.differences:  # the user's level is chosen's, the partner's rejected's
            assert mine[d.dimension] == d.chosen != d.rejected
            assert d.dimension in ("format", "depth", "expertise")
        partner = by_user.get(p.rejected_for)
        if partner is not None:  # couples are mutual: the same base answer, both ways
            assert partner.rejected_for == p.task.persona.persona_id
    manifest = json.loads((rewritten / "release" / "manifest.json").read_text())
    assert manifest["config"]["generation"]["design"] == "rewrite"
    assert {"base_answer", "rewrite"} <= set(manifest["prompts"])


def test_a_rewrite_builds_release_verifies(rewritten):
    from pipeline.release.publish import verify

    assert verify(rewritten / "release") == []


def test_the_design_records_nothing_new_for_a_plan_build(tmp_path, sim_url):
    """A plan build's manifest keeps its bytes: the new settings are left out at their
    default, as evaluate_all was."""
    from pipeline.config import load_config

    cfg = load_config(write_config(tmp_path, sim_url))
    assert "design" not in cfg.recorded()["generation"]
    assert "dimensions" not in cfg.recorded()["generation"]
    bad = write_config(
        tmp_path / "bad", sim_url, generation={"design": "rewrite", "dimensions": ["tone"]}
    )
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="a rewrite can realise only"):
        load_config(bad)
