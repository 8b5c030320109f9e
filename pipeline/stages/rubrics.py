"""Stage 3 — rubrics: each task's rubric aspects and narrative, by `rubrics.source`:
`planner` (a planner call derives them), `imported` (the user's own published aspects, no call)
or `both` (the imported ones are used; the planner's are recorded beside them, with how many of
the imported aspects it found: the audit's agreement figure).

Every aspect must rest on the profile: its `evidence` cites a real profile item id in brackets
or quotes a profile item. And it must be a requirement, not a dimension: Qwen2.5-1.5B returned
"format", "tone" and "values" as aspects, which no answer can be checked against; an aspect of
fewer than MIN_WORDS words is not used, and neither is one that copies the planner prompt's own
worked example: a run of COPIED words of its instructions (the 1.5B model gave a retired dyer
"Keep each step doable in a ten-minute lunch break"), or one of the example's own words
(`example_words` in prompts/planner.yaml) that the user never wrote ("Use simple language, as
the user is a marine electrician"). Aspects that fail any of these are moved to
`ungrounded_aspects` (kept for the audit, never used); a plan with no usable aspect left is
dropped as `planner_ungrounded`.
An aspect the plan repeats (same words, any case or spacing) is kept once: a small real model
wrote one aspect five times, which would weigh it five times in the adherence judge's score.

A grounded aspect can still be one any user would get: the 1.5B cited a post for "Use clear and
concise language" and "Use a tone that suits them". With `rubrics.refuse_generic` (the default)
an aspect that names nothing of its user — none of its words, outside the question's, is a word
of the user's posts that few other users' posts share (`distinctive`) — is moved to
`generic_aspects` (kept for the audit, never used); a plan left with none is dropped as
`planner_generic`. Model-free and lenient (one distinctive word passes): on the recorded 1.5B
builds it refused 69% of the grounded aspects (bench/README.md "generic aspects").
"""

from __future__ import annotations

import functools
import re
from collections import Counter

from pipeline.calls import LLMError
from pipeline.llm.prompts import load_prompt
from pipeline.records import AspectAgreement, Dropped, RubricAspect, RubricRecord, Task
from pipeline.stages.base import RunContext, Stage, model_stage_done, process_stage
from pipeline.store import Records
from pipeline.text import content_words, normalise, runs

CITED_ID = re.compile(r"\[([^\[\]]+)\]")
QUOTE = re.compile(r"['\"‘“]([^'\"’”]{12,})['\"’”]")
MIN_QUOTE = 12  # characters of a quote that must occur verbatim in a profile item
MIN_WORDS = 4  # "Keep it under ten minutes" is a requirement; "tone" is not
COPIED = 5  # words in a run shared with the planner's instructions: copied, not derived
# a word of a user's posts is theirs when fewer than this share of the other users' posts have
# it: "language", "tone" and "use" are everyone's; "alto", "Neukölln" and "deload" are not
DISTINCTIVE_SHARE = 0.1


@functools.cache
def _instructions() -> tuple[frozenset[tuple[str, ...]], frozenset[str]]:
    """The planner's instructions as runs of COPIED words, and its example's own words."""
    planner = load_prompt("planner")
    example = {w.lower() for w in planner.extra.get("example_words") or ()}
    return frozenset(runs(planner.system, COPIED)), frozenset(example)


def copied(aspect: RubricAspect, task: Task) -> bool:
    """The aspect repeats the planner prompt's example rather than this user's posts."""
    instructions, example = _instructions()
    if runs(aspect.aspect, COPIED) & instructions:
        return True
    borrowed = content_words(aspect.aspect) & example
    said = content_words(" ".join([task.question, *(i.text for i in task.profile)]))
    return bool(borrowed - said)


def grounded(aspect: RubricAspect, task: Task) -> bool:
    if len(aspect.aspect.split()) < MIN_WORDS or copied(aspect, task):
        return False
    ids = {i.id for i in task.profile}
    if any(c.strip() in ids for c in CITED_ID.findall(aspect.evidence)):
        return True
    texts = [i.text.lower() for i in task.profile]
    for quote in QUOTE.findall(aspect.evidence):
        quote = quote.strip().lower().rstrip(".…")
        if len(quote) >= MIN_QUOTE and any(quote in t for t in texts):
            return True
    return False


def _words(text: str) -> set[str]:
    # a quote's closing mark sticks to its last word: 'on pottery' -> "pottery'"
    return {w.strip("'’") for w in content_words(text)}


def distinctive(tasks) -> dict[str, frozenset[str]]:
    """Each user's distinctive words: those of their posts that fewer than DISTINCTIVE_SHARE of
    the run's other users' posts have (with no other user, every word of their posts)."""
    posts = {}
    for t in tasks:
        p = t.persona
        if p.persona_id not in posts:
            posts[p.persona_id] = _words(" ".join(i.text for i in p.profile))
    df = Counter(w for ws in posts.values() for w in ws)
    others = max(len(posts) - 1, 1)
    return {
        u: frozenset(w for w in ws if (df[w] - 1) / others < DISTINCTIVE_SHARE)
        for u, ws in posts.items()
    }


def generic(aspect: RubricAspect, task: Task, theirs: frozenset[str]) -> bool:
    """The aspect names nothing of this user: none of its words outside the question is one of
    the user's distinctive words (`distinctive`)."""
    return not (_words(aspect.aspect) - _words(task.question)) & theirs


def distinct(aspects: list[RubricAspect]) -> list[RubricAspect]:
    seen: set[str] = set()
    out = []
    for a in aspects:
        key = normalise(a.aspect)
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


AGREE = 0.5  # share of the shorter aspect's content words the other must have to match it


def agreement(imported: list[RubricAspect], planned: list[RubricAspect]) -> AspectAgreement:
    """Which imported aspects the planner found: a planner aspect matches when the two share at
    least half the content words of the shorter one (model-free; first match wins)."""
    words = [content_words(a.aspect) for a in planned]
    matches: list[int | None] = []
    for a in imported:
        mine = content_words(a.aspect)
        hit = next(
            (
                k
                for k, w in enumerate(words, 1)
                if mine and w and len(mine & w) >= AGREE * min(len(mine), len(w))
            ),
            None,
        )
        matches.append(hit)
    return AspectAgreement(
        found=sum(m is not None for m in matches), of=len(imported), matches=matches
    )


def imported(task: Task) -> RubricRecord | Dropped:
    if not task.imported_aspects:
        return Dropped(
            stage=STAGE.name,
            id=task.task_id,
            reason="rubrics_none_imported",
            detail=f"question {task.question_id} has no rubric_aspects to import",
        )
    return RubricRecord(
        task=task,
        rubric_aspects=distinct(task.imported_aspects),
        narrative=task.imported_narrative or task.persona.narrative or "",
        source="imported",
    )


def stated(task: Task) -> RubricRecord:
    """A library user's aspects are their own preference statements: what they said they want
    is what an answer is judged by, in their words (a 1.5B planner wrote aspects any user would
    get: "Use a tone that suits them")."""
    return RubricRecord(
        task=task,
        rubric_aspects=[
            RubricAspect(
                aspect=p.statement,
                evidence=f"[stated preference] {p.dimension}: {p.level}",
                reason=f"the user's own statement of their {p.dimension} preference",
            )
            for p in task.persona.preferences
        ],
        narrative=task.persona.narrative or task.persona.summary,
        source="stated",
    )


async def run(ctx: RunContext, tasks: Records) -> Records:
    planner = load_prompt("planner")
    source = ctx.cfg.rubrics.source
    refuse = ctx.cfg.rubrics.refuse_generic and source in ("planner", "stated")

    @functools.cache
    def words() -> dict[str, frozenset[str]]:  # read once, when a plan first needs it
        return distinctive(tasks)

    async def plan(task: Task) -> RubricRecord | Dropped:
        if source == "imported":
            return imported(task)
        if source == "stated" and task.persona.preferences:
            return stated(task)
        try:
            result = await ctx.llm.call(
                planner,
                stage=STAGE.name,
                model=ctx.cfg.model.generator,
                variables={
                    "profile": [i.model_dump() for i in task.profile],
                    "question": task.question,
                },
            )
        except LLMError as e:  # a PermanentLLMError is not one: the run stops
            return Dropped(
                stage=STAGE.name, id=task.task_id, reason=f"planner_{e.kind}", detail=e.detail
            )
        aspects = result.value.rubric_aspects
        kept = distinct([a for a in aspects if grounded(a, task)])
        if source == "both":
            own = imported(task)
            if isinstance(own, RubricRecord):
                own.source, own.planner_aspects = "both", kept
                own.agreement = agreement(own.rubric_aspects, kept)
                own.ungrounded_aspects = [a for a in aspects if not grounded(a, task)]
                own.calls = {"planner": result.key}
            return own
        if not kept:
            return Dropped(
                stage=STAGE.name,
                id=task.task_id,
                reason="planner_ungrounded",
                detail=f"none of {len(aspects)} aspects is a requirement of {MIN_WORDS}+ words, "
                f"not copied from the prompt, citing a profile item of "
                f"{task.persona.persona_id}",
            )
        theirs = words().get(task.persona.persona_id, frozenset()) if refuse else frozenset()
        common = [a for a in kept if refuse and generic(a, task, theirs)]
        if len(common) == len(kept):
            return Dropped(
                stage=STAGE.name,
                id=task.task_id,
                reason="planner_generic",
                detail=f"no aspect names a word of {task.persona.persona_id}'s posts that "
                f"other users' posts lack: {common[0].aspect!r}",
            )
        return RubricRecord(
            task=task,
            rubric_aspects=[a for a in kept if a not in common],
            narrative=result.value.narrative,
            ungrounded_aspects=[a for a in aspects if not grounded(a, task)],
            generic_aspects=common,
            calls={"planner": result.key},
        )

    await process_stage(STAGE, tasks, ctx.run_dir, plan)  # sharded: finds the shards' work done
    return model_stage_done(STAGE, ctx, tasks)


_PROFILE = [{"id": "p1", "category": "sample", "text": "A sample profile item."}]

STAGE = Stage(
    name="rubrics",
    reads=(Task,),
    input_id=lambda t: t.task_id,
    output=RubricRecord,
    output_id=lambda r: r.task.task_id,
    run=run,
    role="generator",
    tasks=("planner",),
    calls=("planner",),
    samples={"planner": {"profile": _PROFILE, "question": "A question?"}},
    # imported aspects need no planner (stated ones neither, but users without any do)
    configured=lambda cfg: {} if cfg.rubrics.source == "imported" else STAGE.samples,
    funnel="rubrics",
    about="a planner model derives rubric aspects, each citing profile items as evidence, and "
    "a narrative",
)
