"""The rubrics stage's model-free rules on a planner's aspects (issue 37's real text): an aspect
must cite the profile, and be a requirement an answer can be checked against, not the name of
a dimension ("tone", "format"), which Qwen2.5-1.5B returned under the v2 planner prompt; and
it must name something of its user, not what any user would get (issue 46)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from conftest import build, write_config

from pipeline.records import Persona, ProfileItem, RubricAspect, Task, TopLogprob, YesNoOutput
from pipeline.stages.rubrics import distinctive, generic, grounded

POST = "Rehearsal is Thursday at 7 and I always lose the first half hour."


def task() -> Task:
    persona = Persona.model_construct(profile=[ProfileItem(id="u1-p1", category="x", text=POST)])
    return Task.model_construct(persona=persona, profile_ids=None, question="How do I sing?")


def test_an_aspect_is_a_cited_requirement_not_a_dimension():
    cited = "[u1-p1] 'lose the first half hour'"
    assert grounded(
        RubricAspect(aspect="Fit the plan into a one-hour rehearsal", evidence=cited, reason="r"),
        task(),
    )
    for vague in ("tone", "format", "cultural context"):  # what the 1.5B model wrote
        assert not grounded(RubricAspect(aspect=vague, evidence=cited, reason="r"), task())
    assert not grounded(
        RubricAspect(
            aspect="Fit the plan into a one-hour rehearsal",
            evidence="[u9-p9] 'not a post'",
            reason="r",
        ),
        task(),
    )


def test_p_yes_reads_the_yes_and_no_tokens_among_the_alternatives():
    def out(*pairs):
        return YesNoOutput(
            text="yes", top_logprobs=[TopLogprob(token=t, logprob=lp) for t, lp in pairs]
        )

    got = out(("yes", math.log(0.6)), (" No", math.log(0.2)), ("The", math.log(0.1)))
    assert abs(got.p_yes - 0.75) < 1e-9  # 0.6 / (0.6 + 0.2): case and spaces ignored
    assert out(("Yes", math.log(0.3)), ("yes", math.log(0.3))).p_yes == 1.0
    assert out(("Maybe", 0.0)).p_yes is None


def test_an_aspect_copied_from_the_planner_prompts_example_is_not_used():
    """Qwen2.5-1.5B gave a retired dyer the planner prompt's own example aspects."""
    cited = "[u1-p1] 'lose the first half hour'"
    for copied in (
        "Use wiring terms freely, since they are an electrician",
        "Keep each step doable in a ten-minute lunch break",
    ):
        assert not grounded(RubricAspect(aspect=copied, evidence=cited, reason="r"), task())
    assert grounded(
        RubricAspect(
            aspect="Keep each step short enough for a tired choir", evidence=cited, reason="r"
        ),
        task(),
    )


def test_an_aspect_borrowing_the_examples_words_is_not_used_unless_the_user_wrote_them():
    cited = "[u1-p1] 'lose the first half hour'"
    borrowed = RubricAspect(
        aspect="Use simple language, as the user is a marine electrician",
        evidence=cited,
        reason="r",
    )
    assert not grounded(borrowed, task())
    persona = Persona.model_construct(
        profile=[
            ProfileItem(
                id="u1-p1", category="x", text="I'm an electrician and I lose the first half hour."
            )
        ]
    )
    own = Task.model_construct(persona=persona, profile_ids=None, question="How do I sing?")
    mine = RubricAspect(
        aspect="Use plain words, since they work as an electrician", evidence=cited, reason="r"
    )
    assert grounded(mine, own)  # the user did write it


def user(pid: str, *posts: str, question: str = "How do I get better at this?") -> Task:
    persona = Persona.model_construct(
        persona_id=pid,
        profile=[ProfileItem(id=f"{pid}-p{k}", category="x", text=t) for k, t in enumerate(posts)],
    )
    return Task.model_construct(persona=persona, profile_ids=None, question=question)


def test_an_aspect_any_user_would_get_names_nothing_of_its_user():
    """Aspects the 1.5B planner wrote (real-default, recorded): a generic one cites a post but
    shares no word with it that the other users' posts lack."""
    alto = user("u1", "Rehearsal is Thursday and I always lose my alto line.", "I use a metronome.")
    others = [
        user(f"u{k}", f"I use my phone and clear notes to practise scales, day {k}.")
        for k in range(2, 12)
    ]
    words = distinctive([alto, *others])
    assert "alto" in words["u1"] and "use" not in words["u1"]  # everyone's posts "use"

    def is_generic(text: str, task: Task = alto) -> bool:
        aspect = RubricAspect(aspect=text, evidence="[u1-p0]", reason="r")
        return generic(aspect, task, words[task.persona.persona_id])

    for common in (
        "Use clear and concise language",
        "Use a tone that suits them, as they practise",
        "Keep the answer concise and to the point",
    ):
        assert is_generic(common), common
    assert not is_generic("Offer tips on learning the alto part at home during rehearsals")
    # a word the question already has names nothing of the user
    asks_alto = user("u1", *(i.text for i in alto.persona.profile), question="Alto tips?")
    assert is_generic("Give alto exercises", asks_alto)
    assert not is_generic("Give alto exercises")
    # with nobody to compare against, each of the user's words is theirs
    assert distinctive([alto])["u1"] >= {"alto", "metronome", "use"}


def test_a_plan_whose_aspects_name_nothing_of_its_user_is_dropped(tmp_path, sim_url):
    """Six users whose posts are word for word the same: no aspect can name something of one
    that the others lack, so every plan is refused (rubrics.refuse_generic, the default) and
    the build says why; with the refusal off the same plans make pairs."""
    posts = ["I am new to this and on a tight budget.", "I only have ten minutes a day."]
    cats = ["Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"]
    users = tmp_path / "users.jsonl"
    users.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "question": f"How do I get better at thing number {i}?",
                    "profile": [
                        {"id": f"u{i}-{k}", "category": cat, "text": t} for k, t in enumerate(posts)
                    ],
                    "category": cat,
                }
            )
            + "\n"
            for i, cat in enumerate(cats * 2)
        )
    )

    def run(name: str, refuse: bool) -> dict:
        config = write_config(
            tmp_path / name,
            sim_url,
            run_id=name,
            personas={"source": str(users), "per_category": 2},
            rubrics={"refuse_generic": refuse},
        )
        try:
            return build(config)
        except Exception as e:  # noqa: BLE001 - the build that releases nothing says why
            return {"error": str(e), "run_dir": tmp_path / name / "outputs" / name}

    refused = run("refused", True)
    assert "0 pairs released: the rubrics stage passed on none of its 6 records" in refused["error"]
    assert "planner_generic 6" in refused["error"] and "rubrics.source: stated" in refused["error"]
    dropped = [json.loads(x) for x in (Path(refused["run_dir"]) / "dropped.jsonl").open()]
    assert {d["reason"] for d in dropped} == {"planner_generic"} and len(dropped) == 6
    kept = run("kept", False)
    assert kept["funnel"]["rubrics"] == 6 and kept["funnel"]["released"] > 0
