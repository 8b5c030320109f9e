"""The rewrite design (issue 46): one base answer rewritten for the user and for a contrasting
user, one concrete instruction per dimension on which they differ, each difference verified in
the text; library users' aspects are their own preference statements (no planner call)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import build, write_config

from pipeline.llm.prompts import load_prompt
from pipeline.realised import (
    could_show,
    echoed,
    explanations,
    layout,
    realised,
    unasked,
    visible,
)
from pipeline.records import Pair, RubricRecord

REPO = Path(__file__).resolve().parent.parent
ORDER = ["cultural_context", "constraints", "format", "expertise"]
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
    assert realised("format", ("step_by_step", "prose"), (STEPS, PROSE))
    assert realised("format", ("prose", "bulleted_list"), (PROSE, BULLETS))
    assert not realised("format", ("step_by_step", "prose"), (STEPS, STEPS))
    # numbered steps against the same points as bullets: one answer to a reader (real-fit v2)
    assert not realised("format", ("step_by_step", "bulleted_list"), (STEPS, BULLETS))
    short, long = "Wet it. Paint.", "Wet the paper first, because the wash spreads evenly. " * 3
    assert realised("depth", ("in_depth", "brief"), (long, short))
    assert not realised("depth", ("brief", "in_depth"), (long, short))
    plain = "Practise intervals (the distance between two notes) daily, which is the basis."
    terse = "Practise intervals daily."
    assert explanations(plain) > explanations(terse) == 0
    assert realised("expertise", ("novice", "expert"), (plain, terse))
    assert not realised("expertise", ("expert", "novice"), (plain, terse))
    assert realised("tone", ("casual", "formal"), (plain, terse)) is None  # not model-free


def test_a_dimension_with_signs_is_verified_by_the_words_that_show_each_level():
    signs = load_prompt("rewrite").extra["signs"]["cultural_context"]
    uk = "Start with a cheap set of pans from a shop in the UK, then practise daily."
    india = "Start with a cheap set of pans from a shop in India, then practise daily."
    levels = ("european", "south_asian")
    assert realised("cultural_context", levels, (uk, india), signs)
    assert not realised("cultural_context", levels, (india, uk), signs)
    assert not realised("cultural_context", levels, (uk, uk), signs)  # the same lean: no
    # one side names the user's country, the other none: the advice is the same (real-fit v2)
    nowhere = "Start with a cheap set of pans from a shop, then practise daily."
    assert not realised("cultural_context", levels, (uk, nowhere), signs)
    # whole words only: "Indiana" and "Ukraine" show neither level
    assert not realised("cultural_context", levels, ("Go to Indiana.", "Go to Ukraine."), signs)
    budget = load_prompt("rewrite").extra["signs"]["constraints"]
    cheap, dear = "Buy a free app and cheap paper.", "Buy the best-quality paper; worth paying."
    assert realised("constraints", ("tight_budget", "flexible_budget"), (cheap, dear), budget)
    assert not realised("constraints", ("flexible_budget", "tight_budget"), (cheap, dear), budget)


def test_a_word_the_question_uses_shows_no_users_level():
    """demo-local, recorded: "a very busy schedule" restated on both sides read as time_poor,
    and a pair whose only change was the partner's "free or cheap" was released."""
    signs = load_prompt("rewrite").extra["signs"]["constraints"]
    question = "How can I fit art or music practice into a very busy schedule?"
    base = "To fit art or music practice into a very busy schedule, set aside time and use {}."
    chosen, rejected = base.format("apps"), base.format("free or cheap apps")
    levels = ("time_poor", "tight_budget")
    assert realised("constraints", levels, (chosen, rejected), signs)  # "busy" counted
    asked = unasked(signs, question)
    assert "busy" in signs["time_poor"] and "busy" not in asked["time_poor"]
    assert not realised("constraints", levels, (chosen, rejected), asked)
    assert not could_show("constraints", levels, chosen, asked)  # no rejected call for it
    quick = "Ten quick minutes a day: " + chosen
    assert realised("constraints", levels, (quick, rejected), asked)  # the user's own words do
    assert unasked(None, question) is None


def test_chosen_alone_rules_a_difference_out_only_where_both_could_not_show_it():
    """Issue 47 item 4: the rejected rewrite is asked only if chosen's text leaves the
    difference possible; `could_show` is chosen's half of `realised`, so no pair that would
    have been released is lost (realised implies could_show, on every case below)."""
    signs = load_prompt("rewrite").extra["signs"]
    uk = "Start with a cheap set of pans from a shop in the UK, then practise daily."
    india = "Start with a cheap set of pans from a shop in India, then practise daily."
    nowhere = "Start with a cheap set of pans from a shop, then practise daily."
    cheap, dear = "Buy a free app and cheap paper.", "Buy the best-quality paper; worth paying."
    cases = [
        ("cultural_context", ("european", "south_asian"), signs["cultural_context"]),
        ("cultural_context", ("south_asian", "european"), signs["cultural_context"]),
        ("constraints", ("tight_budget", "flexible_budget"), signs["constraints"]),
        ("constraints", ("flexible_budget", "tight_budget"), signs["constraints"]),
        ("format", ("step_by_step", "prose"), None),
        ("format", ("prose", "bulleted_list"), None),
        ("format", ("step_by_step", "bulleted_list"), None),
        ("depth", ("in_depth", "brief"), None),
    ]
    texts = [uk, india, nowhere, cheap, dear, STEPS, BULLETS, PROSE]
    ruled_out = 0
    for dim, levels, words in cases:
        for x in texts:
            possible = could_show(dim, levels, x, words)
            ruled_out += not possible
            for y in texts:
                if realised(dim, levels, (x, y), words):
                    assert possible, (dim, levels, x, y)
    assert ruled_out > len(cases)  # it does rule pairs out, or it saves nothing
    assert not could_show(
        "cultural_context", ("european", "south_asian"), nowhere, signs["cultural_context"]
    )
    assert not visible("format", ("step_by_step", "bulleted_list"))
    assert visible("format", ("prose", "bulleted_list")) and visible("tone", ("casual", "formal"))


def test_a_rewrite_that_repeats_its_instruction_is_caught():
    """The real-fit recording of v2: a 1.5B wrote "Lay out your camera settings as numbered
    steps in the order to do them" into an answer, and one rejected answer was its two
    instructions and nothing else; such a pair is dropped (`instructions_echoed`)."""
    told = load_prompt("rewrite").extra["directions"]
    steps, rich = told["format"]["step_by_step"], told["constraints"]["flexible_budget"]
    leaked = "1. Lay out your camera settings as numbered steps in the order to do them.\n2. Go."
    assert echoed(leaked, [steps]) == "as numbered steps in the order"
    assert echoed("- " + rich, [rich, steps])
    clean = "1. Open the aperture wide.\n2. Raise the ISO a step at a time, in order."
    assert echoed(clean, [steps, rich]) is None
    # real-fit v3: the instruction's "this user", paraphrased around (no six words in a row)
    said = "The best-quality options are available for this user, and they are worth it."
    assert echoed(said, [rich]) == "this user"
    assert echoed("Check the user manual first.", [rich]) is None


def test_every_level_a_rewrite_can_be_told_can_be_seen():
    """A dimension whose directions are not read off the text by realised.py's own rules
    lists words for every one of its levels: a level with no signs could never be verified."""
    table = load_prompt("rewrite").extra
    taxonomy = yaml.safe_load((REPO / "personas" / "taxonomy.yaml").read_text())["dimensions"]
    for dimension, told in table["directions"].items():
        assert set(told) == set(taxonomy[dimension]["levels"]), dimension
        if dimension in ("format", "depth", "expertise"):
            continue
        assert set(table["signs"][dimension]) == set(told), dimension
        assert all(table["signs"][dimension].values()), dimension


def rewrite_config(tmp: Path, sim_url: str, generation: dict | None = None, **changes) -> Path:
    """A rewrite-design build of 24 library users on the simulator."""
    return write_config(
        tmp,
        sim_url,
        personas={"per_category": 8},
        rubrics={"source": "stated"},
        generation={
            "design": "rewrite",
            "word_budget": 100,
            "dimensions": ORDER,
            "dimensions_per_pair": 2,
            "strategies": None,  # the demo config's are the plan design's
            **(generation or {}),
        },
        **({"filters": SIM_FILTERS} | changes),
    )


# the simulator's adherence judge knows its own planner's aspects, not the rewrite's signs of
# a stated preference: where its judges qualify (the sim's seed follows the config), it would
# fail chosen for what its own rewrite did; the model-free reading verifies these pairs
SIM_FILTERS = {"judges": "qualified", "min_adherence_chosen": 0.0, "max_adherence_rejected": 1.0}


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory, sim_url) -> Path:
    return Path(build(rewrite_config(tmp_path_factory.mktemp("rewrite"), sim_url))["run_dir"])


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
    by_id = {r.task.persona.persona_id: r.task.persona for r in rubrics}
    for p in pairs:
        assert p.rejected_strategy == "persona_rewrite" and p.rejected_for
        assert set(p.calls) == {"base_answer", "chosen", "rejected"}
        assert set(p.prompt_versions) == {"base_answer", "rewrite"}
        assert p.differences and any(d.realised for d in p.differences)
        mine = {x.dimension: x.level for x in p.task.persona.preferences}
        for d in p.differences:  # the user's level is chosen's, the partner's rejected's
            assert mine[d.dimension] == d.chosen != d.rejected
        # at most two, the first of the listed dimensions on which the two users differ
        theirs = {x.dimension: x.level for x in by_id[p.rejected_for].preferences}
        differ = [
            d
            for d in ORDER
            if d in mine
            and d in theirs
            and mine[d] != theirs[d]
            and visible(d, (mine[d], theirs[d]))  # two lists never show: not asked
        ]
        assert [d.dimension for d in p.differences] == differ[:2]
        partner = by_user.get(p.rejected_for)
        if partner is not None:  # couples are mutual: the same base answer, both ways
            assert partner.rejected_for == p.task.persona.persona_id
    shown = {d.dimension for p in pairs for d in p.differences if d.realised}
    assert {"cultural_context", "constraints"} <= shown
    manifest = json.loads((rewritten / "release" / "manifest.json").read_text())
    assert manifest["config"]["generation"]["design"] == "rewrite"
    assert {"base_answer", "rewrite"} <= set(manifest["prompts"])
    # issue 46: the card says which signal selected the pairs and which evaluates them
    card = (rewritten / "release" / "README.md").read_text()
    assert "selected by that model-free reading alone" in card and "--position-free" in card


def test_a_rewrite_builds_release_verifies(rewritten):
    from pipeline.release.publish import verify

    assert verify(rewritten / "release") == []


def test_the_release_says_what_separates_each_rewrite_pair(rewritten):
    """`differences` is released: a reader of the split sees which preference each pair turns
    on, each side's level and whether the text shows it (pairs.jsonl had it, the release not)."""
    import datasets

    made = {p.pair_id: p for p in lines(rewritten / "pairs.jsonl", Pair)}
    rows = datasets.load_dataset(str(rewritten / "release"), split="test")
    assert rows.num_rows
    for row in rows:
        assert row["differences"] == [d.model_dump() for d in made[row["id"]].differences]
        assert row["differences"] and any(d["realised"] for d in row["differences"])


def test_the_design_records_nothing_new_for_a_plan_build(tmp_path, sim_url):
    """A plan build's manifest keeps its bytes: the new settings are left out at their
    default, as evaluate_all was."""
    from pipeline.config import load_config

    cfg = load_config(write_config(tmp_path, sim_url))
    assert "design" not in cfg.recorded()["generation"]
    assert "dimensions" not in cfg.recorded()["generation"]
    assert "dimensions_per_pair" not in cfg.recorded()["generation"]
    assert "rewrite_temperature" not in cfg.recorded()["generation"]
    bad = write_config(
        tmp_path / "bad", sim_url, generation={"design": "rewrite", "dimensions": ["tone"]}
    )
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="a rewrite can realise only"):
        load_config(bad)
    plan = write_config(tmp_path / "plan", sim_url, generation={"rewrite_temperature": 0.8})
    with pytest.raises(ConfigError, match="samples the rewrite design's rewrites"):
        load_config(plan)


def test_the_prompts_own_tag_around_a_reply_is_not_the_answer():
    from pipeline.text import unwrap

    assert unwrap(" <answer>Go to Berlin.</answer>\n", "answer") == "Go to Berlin."
    assert unwrap("Use <answer> tags in HTML.", "answer") == "Use <answer> tags in HTML."


def test_a_recipe_may_sample_its_rewrites_and_the_cache_records_how(tmp_path, sim_url):
    """`generation.rewrite_temperature` (bench/README.md "candidates.py": greedy, the 1.5B
    copied its base answer unchanged into half its rewrites): the two rewrites are sent at it,
    seeded by `model.seed`; the base answer stays greedy; the manifest records it (and a
    greedy recipe's manifest keeps its bytes: above)."""
    from pipeline.llm.cache import ResponseCache

    config = rewrite_config(tmp_path, sim_url, {"rewrite_temperature": 0.8}, model={"seed": 7})
    result = build(config)
    rows = ResponseCache(Path(result["run_dir"]).parent / "cache.sqlite").rows()
    sent = {}
    for r in rows:
        sent.setdefault(r["task"], set()).add(
            (r["request"]["params"].get("temperature"), r["request"]["seed"])
        )
    assert sent["rewrite"] == {(0.8, 7)}
    assert sent["base_answer"] == {(0.0, 7)}
    manifest = json.loads((Path(result["release_dir"]) / "manifest.json").read_text())
    assert manifest["config"]["generation"]["rewrite_temperature"] == 0.8


def test_an_instructed_rewrite_breaks_the_users_own_stated_preference(tmp_path, sim_url):
    """instructed_rewrite (issue 46): no partner; the rejected side is the base rewritten for
    another visible level of each dimension the user stated, recorded per pair."""
    from pipeline.store import dropped_file

    config = rewrite_config(
        tmp_path,
        sim_url,
        generation={"strategies": ["instructed_rewrite"]},
    )
    run = Path(build(config)["run_dir"])
    directions = load_prompt("rewrite").extra["directions"]
    pairs = lines(run / "pairs.jsonl", Pair)
    assert len(pairs) >= 6
    for p in pairs:
        assert p.rejected_strategy == "instructed_rewrite" and p.rejected_for is None
        assert set(p.calls) == {"base_answer", "chosen", "rejected"}
        mine = {x.dimension: x.level for x in p.task.persona.preferences}
        stated = [d for d in ORDER if d in mine]
        assert [d.dimension for d in p.differences] == stated[:2]
        for d in p.differences:  # the user's own level against one they did not state
            assert mine[d.dimension] == d.chosen != d.rejected in directions[d.dimension]
            assert visible(d.dimension, (d.chosen, d.rejected))
        assert any(d.realised for d in p.differences)
    drops = list(dropped_file(run).read())
    assert drops and not [d for d in drops if d.reason == "no_contrast"]  # no partner needed
    card = (run / "release" / "README.md").read_text()
    assert "against the user's own stated preference" in card


@pytest.mark.parametrize(
    "generation, refused",
    [
        ({"design": "rewrite", "strategies": ["persona_swap"]}, "another generation.design"),
        ({"strategies": ["instructed_rewrite"]}, "another generation.design"),
        ({"design": "rewrite", "strategies": ["wrong_tone"]}, r"\['wrong_tone'\]"),
    ],
)
def test_a_strategy_of_the_other_design_is_refused_before_any_call(
    tmp_path, sim_url, generation, refused
):
    import httpx

    from pipeline.llm.prompts import PromptError

    def sim_requests(url: str) -> int:
        return httpx.get(url.removesuffix("/v1") + "/stats").json().get("requests", 0)

    config = rewrite_config(tmp_path, sim_url, generation=generation)
    if "design" not in generation:  # the plan design
        config = write_config(tmp_path / "plan", sim_url, generation=generation)
    calls = sim_requests(sim_url)
    with pytest.raises(PromptError, match=refused):
        build(config)
    assert sim_requests(sim_url) == calls


def test_a_rewrite_pair_is_judged_for_adherence_on_what_it_was_rewritten_on(rewritten):
    """Both rewrites keep the base answer's fit on every other stated preference: judged on
    all of them, chosen fails `min_adherence_chosen` and rejected passes as adherent for what
    the pair never varied (a qualifying judge dropped 9 of 12 simulator pairs so)."""
    from pipeline.checks.adherence import CHECK

    pairs = lines(rewritten / "pairs.jsonl", Pair)
    for p in pairs:
        dims = {d.dimension for d in p.differences}
        said = [x.statement for x in p.task.persona.preferences if x.dimension in dims]
        for ask in CHECK.asks:
            shown = [a["aspect"] for a in ask.variables(p, None)["aspects"]]
            assert shown == [a.aspect for a in p.rubric_aspects if a.aspect in said]
            assert len(shown) == len(p.differences) < len(p.rubric_aspects)
    plan = p.model_copy(update={"differences": []})  # a plan pair: every aspect, as before
    assert len(CHECK.asks[0].variables(plan, None)["aspects"]) == len(p.rubric_aspects)


def test_an_instructed_rewrite_takes_its_stand_in_words_from_the_runs_users(tmp_path, sim_url):
    """No fixed list marks the rejected side: each stand-in statement is a statement another
    user of the run made at that level (so a place on a rejected side is some user's home),
    and the artifact gate, at a size where it runs, rewrites nothing by persona_swap (the plan
    design's rewrite) under the rewrite design."""
    config = rewrite_config(
        tmp_path,
        sim_url,
        generation={"strategies": ["instructed_rewrite"]},
        filters=SIM_FILTERS | {"artifact_min_pairs": 10},
    )
    run = Path(build(config)["run_dir"])
    said = {}
    for r in lines(run / "rubrics.jsonl", RubricRecord):
        for p in r.task.persona.preferences:
            said.setdefault((p.dimension, p.level), set()).add(p.statement)
    pairs = lines(run / "pairs.jsonl", Pair)
    assert len(pairs) >= 10
    placed = set()
    for p in pairs:
        assert p.rewritten is None and p.rejected_strategy == "instructed_rewrite"
        own = {x.statement for x in p.task.persona.preferences}
        for d in p.differences:
            told = [s for s in said[(d.dimension, d.rejected)] if s not in own]
            assert told, (d, p.pair_id)
            if d.dimension == "cultural_context" and d.realised:
                placed.add(p.rejected)
    assert len(placed) >= 2
