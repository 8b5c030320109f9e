"""Pair generation on the simulator: one shared content plan, a chosen answer that follows the
aspects, and rejected answers whose named strategies miss them in visibly different ways."""

from __future__ import annotations

import asyncio
import json
import re
import statistics
from pathlib import Path

import pytest
from conftest import build, write_config

from pipeline.config import load_config
from pipeline.llm import LLM
from pipeline.llm.cache import ResponseCache
from pipeline.records import Pair, RubricRecord, Task
from pipeline.sim.responder import REGISTERS, STYLES, styles_of
from pipeline.stages import RunContext, stage
from pipeline.store import StageFile

STRATEGIES = ["ignore_aspects", "wrong_expertise", "wrong_format", "wrong_tone"]


def layout(text: str) -> str:
    lines = text.splitlines()
    if any(line.startswith("- ") for line in lines):
        return "bullets"
    if any(re.match(r"\d+\. ", line) for line in lines):
        return "steps"
    return "prose"


def opener_registers(text: str) -> set[str]:
    first = text.splitlines()[0]
    return {name for name, sentences in REGISTERS.items() for s in sentences if s in first}


@pytest.fixture(scope="module")
def run(tmp_path_factory, sim_url):
    tmp = tmp_path_factory.mktemp("pairs")
    config = write_config(tmp, sim_url, personas={"per_category": 2})
    return config, build(config)


async def make_pairs(cfg, run_dir: Path, rubrics: list[RubricRecord]) -> None:
    cache = ResponseCache(cfg.cache_path)
    llm = LLM(cfg.model, cache)
    try:
        ctx = RunContext(cfg, run_dir, llm, cache)
        ctx.outputs[Task] = None  # rubrics held in memory: users coupled in task id order
        await stage("pairs").run(ctx, rubrics)
    finally:
        await llm.aclose()
        cache.close()


@pytest.fixture(scope="module")
def by_strategy(run, tmp_path_factory):
    """The same rubrics turned into pairs once per strategy, through the real pairs stage."""
    config, result = run
    rubrics = list(StageFile(Path(result["run_dir"]), "rubrics", RubricRecord).read())
    out: dict[str, dict[str, Pair]] = {}
    for strategy in STRATEGIES:
        cfg = load_config(config, generation__strategies=[strategy])
        run_dir = tmp_path_factory.mktemp(strategy)
        asyncio.run(make_pairs(cfg, run_dir, rubrics))
        out[strategy] = {p.task.task_id: p for p in StageFile(run_dir, "pairs", Pair).read()}
    return out


def test_every_pair_records_a_configured_strategy(run):
    _, result = run
    made = list(StageFile(Path(result["run_dir"]), "pairs", Pair).read())
    assert len(made) == 6
    assert {p.rejected_strategy for p in made} <= set(STRATEGIES)
    for p in made:
        assert p.calls.keys() == {"content_plan", "chosen", "rejected"}
        assert p.prompt_versions["rejected"].startswith("rejected@")


def test_both_answers_carry_the_same_key_points(by_strategy):
    ratios = []
    for strategy, made in by_strategy.items():
        assert len(made) == 6
        for p in made.values():
            assert p.rejected_strategy == strategy
            for point in p.key_points:
                assert point in p.chosen and point in p.rejected, (strategy, point)
            ratios.append(len(p.rejected.split()) / len(p.chosen.split()))
            assert len(p.rejected.split()) <= 100 and len(p.chosen.split()) <= 100
    assert 0.85 <= statistics.median(ratios) <= 1.15


def test_strategies_miss_the_user_in_different_ways(by_strategy):
    """The simulator writes each rejected answer as other users' answer: its opening sentences
    are other styles' (the opposite one where a style has one), never a wanted one's, so no
    sentence marks an answer as rejected without the user. Strategies step differently through
    the styles, order them differently, and wrong_format changes the layout."""
    by_tag = {s.tag: s for s in STYLES}
    task_ids = list(by_strategy["ignore_aspects"])
    distinct = 0
    for task_id in task_ids:
        rejected = {s: by_strategy[s][task_id].rejected for s in STRATEGIES}
        distinct += len(set(rejected.values())) >= 3
        chosen = by_strategy["ignore_aspects"][task_id].chosen
        assert all(by_strategy[s][task_id].chosen == chosen for s in STRATEGIES)
        aspects = [a.aspect for a in by_strategy["ignore_aspects"][task_id].rubric_aspects]
        wanted = {s.tag for s in styles_of(aspects)} - {"bullets", "steps"}
        for text in rejected.values():
            opener = text.splitlines()[0].lower()
            assert not [t for t in wanted if t in by_tag and by_tag[t].marker.lower() in opener]
            assert not opener_registers(text)  # no register of its own: other users' sentences
        # wrong_format always changes the layout the user got in the chosen answer
        assert layout(rejected["wrong_format"]) != layout(chosen) or layout(chosen) == "prose"
        if "novice" in wanted:  # a beginner's rejected answers speak to a practitioner
            assert all(by_tag["expert"].phrase in t for t in rejected.values())
    assert distinct >= 0.75 * len(task_ids)


@pytest.fixture(scope="module")
def swapped(run, tmp_path_factory):
    """The same rubrics with the two strategies that write no instruction of their own kind."""
    config, result = run
    rubrics = list(StageFile(Path(result["run_dir"]), "rubrics", RubricRecord).read())
    out = {}
    for strategy in ("persona_swap", "lexical_decoy"):
        cfg = load_config(config, generation__strategies=[strategy])
        run_dir = tmp_path_factory.mktemp(strategy)
        asyncio.run(make_pairs(cfg, run_dir, rubrics))
        out[strategy] = {p.task.task_id: p for p in StageFile(run_dir, "pairs", Pair).read()}
    return rubrics, out


def test_persona_swap_rejects_with_the_answer_a_contrasting_user_gets(swapped, by_strategy):
    """Its rejected answer is the chosen prompt's answer under another user's aspects, to the
    same question and key points: its opening is some user's chosen opening, never this one's."""
    rubrics, out = swapped
    made = out["persona_swap"]
    chosen_openers = {p.chosen.splitlines()[0] for p in by_strategy["ignore_aspects"].values()}
    assert len(made) == 6
    for p in made.values():
        assert p.rejected_strategy == "persona_swap"
        assert p.chosen == by_strategy["ignore_aspects"][p.task.task_id].chosen
        assert p.rejected.splitlines()[0] in chosen_openers
        assert p.rejected.splitlines()[0] != p.chosen.splitlines()[0]
        for point in p.key_points:
            assert point in p.rejected


def test_lexical_decoy_borrows_the_users_words_and_misses_the_aspects(swapped):
    from pipeline.sim.responder import keywords

    by_tag = {s.tag: s for s in STYLES}
    rubrics, out = swapped
    for p in out["lexical_decoy"].values():
        profile = set(keywords(" ".join(i.text for i in p.task.profile)))
        assert len(profile & set(keywords(p.rejected))) > len(profile & set(keywords(p.chosen)))
        wanted = {s.tag for s in styles_of([a.aspect for a in p.rubric_aspects])}
        opener = p.rejected.splitlines()[0].lower()
        assert not [
            t
            for t in wanted - {"bullets", "steps"}
            if t in by_tag and by_tag[t].marker.lower() in opener
        ]


def test_swap_partners_do_not_depend_on_the_order_the_planner_finished_in(sim_url, tmp_path):
    """A user of several questions stands for its couple with the aspects of one of them:
    that used to be whichever plan came back first (the rubrics file's order, which
    concurrency shuffles), so two builds of one config swapped in different answers (28 of
    672 pairs of configs/validity.yaml). It is the first in the questions stage's order."""
    import shutil

    from pipeline.stages.pairs import swap_partners
    from pipeline.store import Records

    config = write_config(
        tmp_path, sim_url, personas={"per_category": 4, "questions_per_persona": 2}
    )
    run_dir = Path(build(config)["run_dir"])
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    shutil.copy(run_dir / "questions.jsonl", shuffled)
    lines = (run_dir / "rubrics.jsonl").read_text().splitlines(keepends=True)
    (shuffled / "rubrics.jsonl").write_text("".join(reversed(lines)))

    def found(folder: Path) -> dict:
        file = StageFile(folder, "rubrics", RubricRecord)
        questions = Records(StageFile(folder, "questions", Task), lambda t: t.task_id)
        return swap_partners(Records(file, lambda r: r.task.task_id), None, questions)

    as_built, reversed_ = found(run_dir), found(shuffled)
    assert len(as_built) == 24 and as_built == reversed_
    # and the partner's aspects are those of its first question in the questions file
    first = {}
    for line in (run_dir / "questions.jsonl").read_text().splitlines():
        task = json.loads(line)
        first.setdefault(task["persona"]["persona_id"], task["task_id"])
    plans = {r.task.task_id: r for r in StageFile(run_dir, "rubrics", RubricRecord).read()}
    for who, aspects, _, _ in as_built.values():
        assert aspects == [a.model_dump() for a in plans[first[who]].rubric_aspects]


def test_a_run_of_partnered_strategies_alone_asks_no_artifact_rewrite(sim_url, tmp_path):
    """persona_swap alone: a task with nobody to contrast takes an instruction strategy, but
    the gate's rewrite step is for recipes that name one (it ran, 23 s at 12,000 users with
    nothing to rewrite, when the fallback strategies were counted as the recipe's)."""
    config = write_config(
        tmp_path, sim_url, personas={"per_category": 2}, generation={"strategies": ["persona_swap"]}
    )
    result = build(config)
    stats = json.loads((Path(result["run_dir"]) / "run_stats.json").read_text())
    assert "pairs: artifact gate and its rewrites" not in stats["parts"]
    assert result["funnel"]["released"] > 0
