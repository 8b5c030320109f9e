"""The rubrics stage's model-free rules on a planner's aspects (issue 37's real text): an aspect
must cite the profile, and be a requirement an answer can be checked against, not the name of
a dimension ("tone", "format"), which Qwen2.5-1.5B returned under the v2 planner prompt."""

from __future__ import annotations

import math

from pipeline.records import Persona, ProfileItem, RubricAspect, Task, TopLogprob, YesNoOutput
from pipeline.stages.rubrics import grounded

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
