"""persona_rewrite, the rewrite design's strategy (`generation.design: rewrite`): one base
answer, rewritten for the user (chosen) and for a contrasting user (rejected), one concrete
instruction per dimension on which the two differ (prompts/rewrite.yaml's `directions`), with
each user's own words; kept if at least one difference shows in the text (pipeline/realised.py).
`rewrite_pair` writes a pair of the design for any two sides (instructed_rewrite.py's too).
"""

from __future__ import annotations

from pipeline.calls import LLMError
from pipeline.realised import could_show, echoed, realised, unasked, visible
from pipeline.records import Difference, Dropped, Pair
from pipeline.strategies.base import StrategySpec
from pipeline.text import unwrap


def contrasted(g, directions: dict, mine: dict, theirs: dict) -> list[str]:
    """The dimensions a couple's rewrites differ on (dimension -> (level, statement) each):
    the recipe's, where their levels differ, both have an instruction and the difference can
    show, at most `dimensions_per_pair`."""
    return [
        d
        for d in g.dimensions
        if d in mine
        and d in theirs
        and mine[d][0] != theirs[d][0]
        and {mine[d][0], theirs[d][0]} <= set(directions[d])
        and visible(d, (mine[d][0], theirs[d][0]))
    ][: g.dimensions_per_pair]


async def write(w, rec, name: str):
    task = rec.task
    g = w.ctx.cfg.generation
    directions = w.prompts["chosen"].extra["directions"]
    if task.task_id not in w.partners:
        return w.dropped(rec, "no_contrast", f"{task.persona.persona_id} has nobody to contrast")
    other, _, _, prefs_b = w.partners[task.task_id]
    mine = stated(task)
    theirs = {p["dimension"]: (p["level"], p["statement"]) for p in prefs_b}
    dims = contrasted(g, directions, mine, theirs)
    if not dims:
        return w.dropped(
            rec,
            "no_contrast",
            f"{task.persona.persona_id} and {other} differ on none of {g.dimensions}",
        )
    return await rewrite_pair(w, rec, name, dims, mine, theirs, rejected_for=other)


def stated(task) -> dict[str, tuple[str, str]]:
    """The task's user's preferences: dimension -> (level, their own statement)."""
    return {p.dimension: (p.level, p.statement) for p in task.persona.preferences}


async def rewrite_pair(w, rec, name: str, dims: list[str], mine: dict, theirs: dict, **more):
    """The pair of one task: the shared base answer rewritten for `mine` (chosen) and for
    `theirs` (rejected) on `dims` (dimension -> (level, statement) each), kept if at least one
    difference shows in the text; `more` goes onto the Pair (`rejected_for`)."""
    task = rec.task
    g = w.ctx.cfg.generation
    directions = w.prompts["chosen"].extra["directions"]
    signs = {
        d: unasked(s, task.question) for d, s in w.prompts["chosen"].extra.get("signs", {}).items()
    }
    side = {"question": task.question, "word_budget": w.budget}
    levels = {d: (mine[d][0], theirs[d][0]) for d in dims}  # chosen's, rejected's
    shown = ", ".join(f"{d} {a}/{b}" for d, (a, b) in levels.items())

    def intended(realised_on) -> list[Difference]:
        return [
            Difference(dimension=d, chosen=a, rejected=b, realised=realised_on(d))
            for d, (a, b) in levels.items()
        ]

    def told(who: dict) -> dict:
        return {
            "statements": [who[d][1] for d in dims],
            "instructions": [directions[d][who[d][0]] for d in dims],
        }

    def shows(text: str, who: dict, role: str) -> Dropped | None:
        if said := echoed(text, told(who)["instructions"]):
            return w.dropped(
                rec, "instructions_echoed", f"{role} repeats its instruction: {said!r}"
            )
        return None

    try:
        base = await w.ask("base_answer", w.tokens, **side)
        side["base"] = base.value
        # greedy unless the recipe samples: a greedy 1.5B rewrite is often its base, unchanged
        sampling = {"temperature": g.rewrite_temperature} if g.rewrite_temperature else None
        chosen = await w.ask("chosen", w.tokens, sampling, **side, **told(mine))
        first = unwrap(chosen.value, "answer")
        if bad := shows(first, mine, "chosen"):
            return bad
        # the rejected rewrite is asked only if chosen's text leaves a difference possible:
        # most unrealised pairs fail on chosen's side, and the call after it buys nothing
        if not any(could_show(d, levels[d], first, signs.get(d)) for d in dims):
            return w.dropped(
                rec,
                "difference_not_realised",
                f"chosen shows none of {shown}: not rewritten",
                differences=intended(lambda d: False),
            )
        rejected = await w.ask("rejected", w.tokens, sampling, **side, **told(theirs))
    except LLMError as e:
        return w.failed(rec, e)
    texts = (first, unwrap(rejected.value, "answer"))
    if bad := shows(texts[1], theirs, "rejected"):
        return bad
    differences = intended(lambda d: realised(d, levels[d], texts, signs.get(d)))
    if not any(x.realised for x in differences):
        return w.dropped(
            rec,
            "difference_not_realised",
            f"none of {shown} shows in the text",
            differences=differences,
        )
    return Pair(
        pair_id=w.pair_id(task),
        task=task,
        rubric_aspects=rec.rubric_aspects,
        narrative=rec.narrative,
        key_points=[],
        chosen=texts[0],
        rejected=texts[1],
        rejected_strategy=name,
        generator_model=w.model,
        prompt_versions=w.versions,
        calls={"base_answer": base.key, "chosen": chosen.key, "rejected": rejected.key},
        differences=differences,
        **more,
    )


STRATEGY = StrategySpec(
    "persona_rewrite",
    "the shared base answer rewritten for a contrasting user of the same category",
    write,
    # couples differ where a rewrite can show it: on the dimensions the design rewrites
    couples=lambda generation: dict.fromkeys(generation.dimensions, 100),
    design="rewrite",
)
