"""The filters stage on the simulator: every pair recorded with scores and reasons; quality
leaks dropped; blind-judge separation flagged; broken judge output never silently kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config

from pipeline.checks import CHECKS, FilterConfig, adherence, blind, quality
from pipeline.checks.answer_similarity import Result as Similarity
from pipeline.checks.blind import Result as BlindCheck
from pipeline.checks.length_ratio import Result as Length
from pipeline.checks.question_duplicates import duplicates
from pipeline.errors import NothingReleased
from pipeline.records import FilterRecord, QualityScores
from pipeline.sim.responder import DEGRADED
from pipeline.sim.server import running
from pipeline.store import StageFile

SMALL = {"per_category": 3}
ALL = {"evaluate_all": True}  # the auditing mode: every check on every pair


def filtered(result: dict) -> list[FilterRecord]:
    return list(StageFile(Path(result["run_dir"]), "filters", FilterRecord).read())


@pytest.fixture(scope="module")
def degraded_url():
    """Most rejected answers turned unhelpful (chosen by request hash, so deterministic)."""
    with running(degrade_rate=0.6) as url:
        yield url


@pytest.fixture(scope="module")
def degraded_run(tmp_path_factory, degraded_url):
    tmp = tmp_path_factory.mktemp("degraded")
    return tmp, build(write_config(tmp, degraded_url, personas=SMALL, filters=ALL))


def read(record: FilterRecord, name: str):
    return next(c for c in CHECKS if c.name == name).read(record)


def test_every_pair_is_recorded_with_scores_and_reasons(degraded_run):
    _, result = degraded_run
    records = filtered(result)
    pairs = (Path(result["run_dir"]) / "pairs.jsonl").read_text().splitlines()
    assert len(records) == len(pairs) == 9
    for r in records:
        assert r.kept == (not r.reasons)
        on = {c.name for c in CHECKS if c.enabled(FilterConfig())}  # opt-in ones are off
        assert set(r.checks) == on and not r.skipped  # evaluate_all
        q, a = read(r, "quality"), read(r, "adherence")
        assert q.chosen and q.rejected and read(r, "blind")
        assert len(a.aspects_chosen) == len(a.aspects_rejected) == len(r.pair.rubric_aspects)
        assert a.chosen == round(sum(a.aspects_chosen) / len(a.aspects_chosen), 4)
        # six judge calls: quality and adherence per answer, the blind judge in both orders
        assert set(r.calls) == {
            "quality_chosen",
            "quality_rejected",
            "adherence_chosen",
            "adherence_rejected",
            "blind_ab",
            "blind_ba",
        }
    assert result["funnel"]["filters_kept"] == sum(r.kept for r in records)


def test_run_stats_say_what_each_stage_and_each_check_spent(degraded_run):
    """Issue 39: run_stats.json has every stage's wall time and own peak memory, and the
    filters' parts (each check's measuring, the gate's run-level pass, qualification)."""
    _, result = degraded_run
    stats = json.loads((Path(result["run_dir"]) / "run_stats.json").read_text())
    names = ["personas", "questions", "rubrics", "pairs", "filters", "annotation", "release"]
    assert set(stats["stages"]) == set(names)
    for spent in stats["stages"].values():
        assert 0 <= spent["wall_s"] <= stats["wall_seconds"]
        assert 0.01 < spent["peak_rss_gib"] < 8  # this process's own, reset per stage (Linux)
    parts = stats["parts"]
    free = [c.name for c in CHECKS if not c.cost and c.enabled(FilterConfig(**ALL))]
    assert {f"filters: {n}" for n in free} <= set(parts)
    assert {"filters: artifact (run-level)", "filters: qualification", "release: probes"} <= set(
        parts
    )
    assert sum(v for k, v in parts.items() if k.startswith("filters")) <= (
        stats["stages"]["filters"]["wall_s"] + 0.01
    )


def test_answers_differing_in_quality_are_dropped_for_it(degraded_run):
    _, result = degraded_run
    records = filtered(result)
    degraded = [r for r in records if r.pair.rejected == DEGRADED]
    intact = [r for r in records if r.pair.rejected != DEGRADED]
    assert degraded and intact
    for r in degraded:
        assert not r.kept
        assert {"quality_gap", "quality_low_rejected"} <= set(r.reasons)
        q = read(r, "quality")
        assert q.rejected.mean < q.chosen.mean
        assert q.gap > FilterConfig().max_quality_gap
    for r in intact:
        assert read(r, "quality").gap == 0
        assert not {"quality_gap", "quality_low_rejected", "quality_low_chosen"} & set(r.reasons)
    kept = {r.pair.pair_id for r in records if r.kept}
    assert kept and kept <= {r.pair.pair_id for r in intact}


def test_pairs_the_blind_judge_separates_are_flagged(degraded_run, degraded_url):
    tmp, _ = degraded_run
    # loosen the quality, length and relevance bars so that only the blind judge can catch it
    loose = {
        "min_quality": 1,
        "max_quality_gap": 5,
        "min_length_ratio": 0.05,
        "drop_off_question": False,
    }
    for drop in (True, False):
        config = write_config(
            tmp / f"blind-{drop}",
            degraded_url,
            personas=SMALL,
            filters={**loose, **ALL, "drop_blind_separated": drop},
            outputs_dir=str(tmp / "outputs"),  # same cache: no new generation calls
        )
        records = filtered(build(config, run_id=f"blind-{drop}"))
        degraded = [r for r in records if r.pair.rejected == DEGRADED]
        assert degraded
        for r in degraded:
            b = read(r, "blind")
            assert b.ab == "A" and b.ba == "B" and b.picked == "chosen"
            assert "blind_separated" in r.flags
            assert r.reasons == (["blind_separated"] if drop else [])
            assert r.kept is not drop


def test_malformed_judge_output_is_retried_then_dropped(tmp_path, sim_factory):
    url = sim_factory(rate_malformed=1.0, fault_tasks="judge_blind", seed=3)
    config = write_config(
        tmp_path,
        url,
        personas={"per_category": 2},
        model={"max_retries": 2, "backoff_initial_s": 0.001, "backoff_max_s": 0.01},
        # such a judge fails qualification (no verdict is no pick); here: the filters' retries
        qualification={"enabled": False},
    )
    with pytest.raises(
        NothingReleased,
        match=r"filters stage passed on none of its 6 records \(judge_cut_off 6",
    ):
        build(config)
    run_dir = tmp_path / "outputs" / "demo"
    result = {"run_dir": str(run_dir), **json.loads((run_dir / "run_stats.json").read_text())}
    records = filtered(result)
    assert len(records) == 6  # generation was not hit: every pair reached the filters
    usage = result["usage"]["filters"]
    # per pair: 4 good calls + 2 blind calls x 3 attempts each
    assert usage["calls"] == 6 * (4 + 2 * 3)
    assert usage["retries"] and usage["failures"] == {"cut_off": 12}  # stopped at max_tokens
    for r in records:
        assert not r.kept
        assert "judge_cut_off" in r.reasons
        assert set(r.errors) == {"blind_ab", "blind_ba"}
        assert all(e.startswith("cut_off") for e in r.errors.values())
        assert "blind" not in r.checks  # no verdict without both orders
        assert read(r, "quality").chosen is not None  # what did succeed is still recorded
        assert "blind_ab" not in r.calls


Q = QualityScores(correctness=5, relevance=5, helpfulness=5)
GOOD = {
    "quality": quality.Result(chosen=Q, rejected=Q, gap=0.0),
    "adherence": adherence.Result(chosen=1.0, rejected=0.0),
    "blind": BlindCheck(ab="tie", ba="tie", picked="none"),
    "length_ratio": Length(ratio=1.0),
}


def decide(results: dict, cfg) -> list[str]:
    """Every check's reasons for these results, in the checks' order (as the stage orders)."""
    return [r for c in CHECKS if c.name in results for r in c.decide(results[c.name], cfg)]


def test_decisions_follow_the_configured_thresholds():
    t = FilterConfig()
    assert decide(GOOD, t) == []
    longer = {**GOOD, "length_ratio": Length(ratio=1.3)}
    assert decide(longer, t) == []
    assert decide(longer, FilterConfig(max_length_ratio=1.2)) == ["length_ratio"]
    lax = {**GOOD, "adherence": adherence.Result(chosen=1.0, rejected=0.67)}
    assert decide(lax, t) == ["rejected_adherent"]
    assert decide(lax, FilterConfig(max_adherence_rejected=0.7)) == []
    strict = {**GOOD, "adherence": adherence.Result(chosen=0.5, rejected=0.0)}
    assert decide(strict, t) == ["chosen_not_adherent"]
    similar = {**GOOD, "answer_similarity": Similarity(similarity=0.97)}
    assert decide(similar, t) == ["answers_near_duplicate"]
    # a failed judge leaves its result partial or absent: skipped, not read as passing or failing
    partial = {**GOOD, "quality": quality.Result(rejected=Q)}
    assert decide({k: v for k, v in partial.items() if k != "blind"}, t) == []


def test_blind_verdicts_count_only_when_they_survive_the_swap():
    assert blind.pick("A", "B") == "chosen"
    assert blind.pick("B", "A") == "rejected"
    assert blind.pick("A", "A") == "none"  # position bias, not a preference
    assert blind.pick("A", "tie") == "none"
    biased = BlindCheck(ab="A", ba="A", picked="none")
    assert blind.flags(biased) == ["blind_position_bias"]
    leak = BlindCheck(ab="B", ba="A", picked="rejected")
    assert decide({**GOOD, "blind": leak}, FilterConfig()) == ["blind_separated"]
    assert decide({**GOOD, "blind": leak}, FilterConfig(drop_blind_separated=False)) == []
    assert blind.flags(leak) == ["blind_separated"]


def test_near_duplicate_questions_threshold_is_configurable(degraded_run):
    _, result = degraded_run
    pairs = [r.pair for r in filtered(result)]
    a = pairs[0]
    twin = a.model_copy(update={"pair_id": "prb-twin", "task": a.task.model_copy()})
    twin.task.question = a.task.question.rstrip("?") + " at all?"
    assert duplicates([a, twin], FilterConfig(max_question_similarity=0.9)) == {
        max(a.pair_id, "prb-twin"): min(a.pair_id, "prb-twin")
    }
    assert duplicates([a, twin], FilterConfig(max_question_similarity=1.0)) == {}
    other = pairs[1]
    assert duplicates([a, other], FilterConfig(max_question_similarity=0.9)) == {}


def test_an_answer_repeating_the_prompts_markup_is_dropped():
    """Found on the real local model: both answers copied the generation prompt's data blocks
    (now text_sanity's template residue, with chat-template tokens and template syntax)."""
    from pipeline.checks import text_sanity
    from pipeline.records import Pair, Persona, Task

    def measured(chosen: str, rejected: str) -> text_sanity.Result:
        task = Task.model_construct(
            question="How do I warm up my voice?",
            profile_ids=None,
            persona=Persona.model_construct(profile=[]),
        )
        pair = Pair.model_construct(chosen=chosen, rejected=rejected, task=task)
        return text_sanity.CHECK.measure(pair, {}, None)

    clean = measured("Warm up with humming for five minutes.", "Start with lip trills.")
    assert decide({**GOOD, "text_sanity": clean}, FilterConfig()) == []
    echo = measured("The answer should be:\n<key_points>\n- Warm up", "Lip trills.</avoid_aspects>")
    assert echo.chosen.residue == "<key_points>" and echo.rejected.residue == "</avoid_aspects>"
    assert decide({**GOOD, "text_sanity": echo}, FilterConfig()) == ["bad_text"]
    assert decide({**GOOD, "text_sanity": echo}, FilterConfig(drop_bad_text=False)) == []
    assert not measured("Use a <b>bold</b> heading and a list.", "x").chosen.residue
    assert not measured("Use a list:\n<b>bold</b> is fine\n- and so is this", "x").chosen.residue
    for residue in (
        "Hum softly.<|im_end|>",
        "Hello {{ question }}",  # prb's own template variable (issue 38: not any Jinja)
        "[INST] Warm up [/INST]",
        "<answer>\n1. Hum softly\n</response>",
    ):
        assert measured(residue, "x").chosen.residue


def test_a_plan_repeating_an_aspect_keeps_it_once():
    from pipeline.records import RubricAspect
    from pipeline.stages.rubrics import distinct

    a = RubricAspect(aspect="Short, practical steps", evidence="[p1] 'ten minutes'", reason="r")
    again = RubricAspect(aspect="short,  practical STEPS", evidence="[p2] 'busy'", reason="s")
    other = RubricAspect(aspect="Budget under 50 euros", evidence="[p3] 'cheap'", reason="t")
    assert distinct([a, again, other, a]) == [a, other]
