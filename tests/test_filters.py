"""The filters stage on the simulator: every pair recorded with scores and reasons; quality
leaks dropped; blind-judge separation flagged; broken judge output never silently kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config

from pipeline.config import FilterConfig
from pipeline.errors import NothingReleased
from pipeline.filters import blind_pick, decide, duplicate_questions, flags_for
from pipeline.records import BlindCheck, FilterRecord, PairChecks, QualityScores
from pipeline.sim.responder import DEGRADED
from pipeline.sim.server import running
from pipeline.store import StageFile

SMALL = {"per_category": 3}


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
    return tmp, build(write_config(tmp, degraded_url, personas=SMALL))


def test_every_pair_is_recorded_with_scores_and_reasons(degraded_run):
    _, result = degraded_run
    records = filtered(result)
    pairs = (Path(result["run_dir"]) / "pairs.jsonl").read_text().splitlines()
    assert len(records) == len(pairs) == 9
    for r in records:
        assert r.kept == (not r.reasons)
        c = r.checks
        assert c.quality_chosen and c.quality_rejected and c.blind
        assert len(c.aspects_chosen) == len(c.aspects_rejected) == len(r.pair.rubric_aspects)
        assert c.adherence_chosen == round(sum(c.aspects_chosen) / len(c.aspects_chosen), 4)
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


def test_answers_differing_in_quality_are_dropped_for_it(degraded_run):
    _, result = degraded_run
    records = filtered(result)
    degraded = [r for r in records if r.pair.rejected == DEGRADED]
    intact = [r for r in records if r.pair.rejected != DEGRADED]
    assert degraded and intact
    for r in degraded:
        assert not r.kept
        assert {"quality_gap", "quality_low_rejected"} <= set(r.reasons)
        assert r.checks.quality_rejected.mean < r.checks.quality_chosen.mean
        assert r.checks.quality_gap > FilterConfig().max_quality_gap
    for r in intact:
        assert r.checks.quality_gap == 0
        assert not {"quality_gap", "quality_low_rejected", "quality_low_chosen"} & set(r.reasons)
    kept = {r.pair.pair_id for r in records if r.kept}
    assert kept and kept <= {r.pair.pair_id for r in intact}


def test_pairs_the_blind_judge_separates_are_flagged(degraded_run, degraded_url):
    tmp, _ = degraded_run
    # loosen the quality and length bars so that only the blind judge can catch the leak
    loose = {"min_quality": 1, "max_quality_gap": 5, "min_length_ratio": 0.05}
    for drop in (True, False):
        config = write_config(
            tmp / f"blind-{drop}",
            degraded_url,
            personas=SMALL,
            filters={**loose, "drop_blind_separated": drop},
            outputs_dir=str(tmp / "outputs"),  # same cache: no new generation calls
        )
        records = filtered(build(config, run_id=f"blind-{drop}"))
        degraded = [r for r in records if r.pair.rejected == DEGRADED]
        assert degraded
        for r in degraded:
            assert r.checks.blind.ab == "A" and r.checks.blind.ba == "B"
            assert r.checks.blind.picked == "chosen"
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
    )
    with pytest.raises(NothingReleased, match=r"dropped all 6 pairs \(judge_unparseable 6"):
        build(config)
    run_dir = tmp_path / "outputs" / "demo"
    result = {"run_dir": str(run_dir), **json.loads((run_dir / "run_stats.json").read_text())}
    records = filtered(result)
    assert len(records) == 6  # generation was not hit: every pair reached the filters
    usage = result["usage"]["filters"]
    # per pair: 4 good calls + 2 blind calls x 3 attempts each
    assert usage["calls"] == 6 * (4 + 2 * 3)
    assert usage["retries"] and usage["failures"] == {"unparseable": 12}
    for r in records:
        assert not r.kept
        assert "judge_unparseable" in r.reasons
        assert set(r.errors) == {"blind_ab", "blind_ba"}
        assert all(e.startswith("unparseable") for e in r.errors.values())
        assert r.checks.blind is None
        assert r.checks.quality_chosen is not None  # what did succeed is still recorded
        assert "blind_ab" not in r.calls


def _checks(**changes) -> PairChecks:
    q = QualityScores(correctness=5, relevance=5, helpfulness=5)
    base = dict(
        quality_chosen=q,
        quality_rejected=q,
        quality_gap=0.0,
        adherence_chosen=1.0,
        adherence_rejected=0.0,
        blind=BlindCheck(ab="tie", ba="tie", picked="none"),
        length_ratio=1.0,
        answer_similarity=0.5,
    )
    return PairChecks(**{**base, **changes})


def test_decisions_follow_the_configured_thresholds():
    t = FilterConfig()
    assert decide(_checks(), t) == []
    assert decide(_checks(length_ratio=1.3), t) == []
    assert decide(_checks(length_ratio=1.3), FilterConfig(max_length_ratio=1.2)) == ["length_ratio"]
    assert decide(_checks(adherence_rejected=0.67), t) == ["rejected_adherent"]
    assert decide(_checks(adherence_rejected=0.67), FilterConfig(max_adherence_rejected=0.7)) == []
    assert decide(_checks(adherence_chosen=0.5), t) == ["chosen_not_adherent"]
    assert decide(_checks(answer_similarity=0.97), t) == ["answers_near_duplicate"]
    # a failed judge leaves its checks empty: they are skipped, not read as passing or failing
    assert decide(_checks(quality_chosen=None, quality_gap=None, blind=None), t) == []


def test_blind_verdicts_count_only_when_they_survive_the_swap():
    assert blind_pick("A", "B") == "chosen"
    assert blind_pick("B", "A") == "rejected"
    assert blind_pick("A", "A") == "none"  # position bias, not a preference
    assert blind_pick("A", "tie") == "none"
    biased = _checks(blind=BlindCheck(ab="A", ba="A", picked="none"))
    assert flags_for(biased) == ["blind_position_bias"]
    leak = _checks(blind=BlindCheck(ab="B", ba="A", picked="rejected"))
    assert decide(leak, FilterConfig()) == ["blind_separated"]
    assert decide(leak, FilterConfig(drop_blind_separated=False)) == []
    assert flags_for(leak) == ["blind_separated"]


def test_near_duplicate_questions_threshold_is_configurable(degraded_run):
    _, result = degraded_run
    pairs = [r.pair for r in filtered(result)]
    a = pairs[0]
    twin = a.model_copy(update={"pair_id": "prb-twin", "task": a.task.model_copy()})
    twin.task.question = a.task.question.rstrip("?") + " at all?"
    assert duplicate_questions([a, twin], 0.9) == {
        max(a.pair_id, "prb-twin"): min(a.pair_id, "prb-twin")
    }
    assert duplicate_questions([a, twin], 1.0) == {}
    other = pairs[1]
    assert duplicate_questions([a, other], 0.9) == {}
