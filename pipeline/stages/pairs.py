"""Stage 4 — pairs: one shared content plan, then a chosen answer that follows every aspect and
a rejected answer with the same key points and word budget that misses them by a named strategy
(the `strategies:` table of prompts/rejected.yaml). Equal general quality comes from the shared
plan; the filters stage checks it held. One strategy, `persona_swap`, writes no instruction:
its rejected answer is the chosen prompt's answer for a contrasting user.

With the artifact gate on (`filters.artifact_gate`, pipeline/checks/artifact.py), the stage ends
with the gate's first half: a pair whose rejected answer the answer-only classifier picks out
confidently, in AFLite rounds over the pairs as first written, is asked again with persona_swap
(`generation.rewrite_artifacts`), so an instruction that leaks costs one call, not the pair.
The first answer stays on the pair (`rewritten`); the gate's second half, in the filters stage,
drops what still leaks.

The recipe names the two prompt files (`generation.chosen_prompt`, `rejected_prompt`) and
whether the content plan comes first (`generation.content_plan`): the published recipe writes
both answers straight from the question, the user's posts and the aspects. Every prompt gets the
same variables; each uses what it needs."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping

from pipeline.calls import LLMError
from pipeline.contrast import User, partners
from pipeline.llm.prompts import PromptError, load_prompt
from pipeline.meter import timed
from pipeline.realised import echoed, realised
from pipeline.records import (
    Difference,
    Dropped,
    Pair,
    Rewritten,
    RubricRecord,
    Task,
    pair_id,
    stable_id,
)
from pipeline.stages.base import (
    RECORDS_IN_FLIGHT,
    RunContext,
    Stage,
    StageReport,
    model_stage_done,
    process_stage,
)
from pipeline.store import Records
from pipeline.text import unwrap

TASKS = ("content_plan", "chosen", "rejected", "base_answer", "rewrite")
REWRITE = "rewrite"  # generation.design: one base answer rewritten for each side's user
# the rejected strategy of the rewrite design: the base answer rewritten for a contrasting user
CONTRAST = "persona_rewrite"


def tasks_of(cfg) -> dict[str, str]:
    """role (content_plan or base_answer, chosen, rejected) -> the prompt task this config
    uses for it."""
    g = cfg.generation
    if g.design == REWRITE:
        return {"base_answer": "base_answer", "chosen": "rewrite", "rejected": "rewrite"}
    plan = {"content_plan": "content_plan"} if g.content_plan else {}
    return plan | {"chosen": g.chosen_prompt, "rejected": g.rejected_prompt}


def pick_strategy(task_id: str, strategies: list[str], seed: int) -> str:
    """Seeded and per task, so adding tasks never reshuffles the strategies of existing ones."""
    return strategies[int(stable_id(seed, task_id), 16) % len(strategies)]


def budget_tokens(words: int) -> int:
    """max_tokens for an answer of at most `words` words: English runs ~1.3 tokens a word; the
    rest is slack. An answer past it is cut off and dropped (`generator_cut_off`), never kept
    half-written."""
    return int(words * 1.6) + 40


def strategies(cfg, prompt) -> list[str]:
    """The configured strategies, or every strategy the rejected prompt defines."""
    return cfg.generation.strategies or list(prompt.extra["strategies"])


# the strategy whose rejected answer is the chosen prompt's answer for a contrasting user (the
# same question and key points): across a release, chosen and rejected then come from one
# distribution by construction, and nothing but fit to this user tells them apart
SWAP = "persona_swap"


def task_order(questions: Records | None) -> dict[str, int]:
    """task id -> its place in the questions stage's file (the pairs stage's second read),
    which is written in one seeded pass; the rubrics file is in the order the planner's
    answers came back, which concurrency makes differ from run to run. Only each line's id is
    read."""
    if questions is None:  # tests: by task id
        return {}
    return {t: n for n, t in enumerate(dict.fromkeys(questions.file.values("task_id")))}


def partner_of(rec: RubricRecord) -> tuple[str, list[dict], list[dict], list[dict]]:
    """What a swap takes from the partner's record: its persona id, aspects, profile and
    stated preferences."""
    aspects = [a.model_dump() for a in rec.rubric_aspects]
    prefs = [p.model_dump() for p in rec.task.persona.preferences]
    profile = [i.model_dump() for i in rec.task.profile]
    return rec.task.persona.persona_id, aspects, profile, prefs


class SwapPartners(Mapping):
    """task id -> (persona id, aspects, profile) of its swap partner, the partner's record read
    back from the rubrics file by byte offset when asked: every partner's aspects and profile
    held at once cost ~0.25 GiB at 50,000 users, and the memory stayed with the process."""

    def __init__(self, file, at: dict[str, int]):
        self.file, self.at = file, at  # task id -> the partner's record's offset

    def __getitem__(self, task: str) -> tuple[str, list[dict], list[dict], list[dict]]:
        return partner_of(next(iter(self.file.read_at([self.at[task]]))))

    def __contains__(self, task: object) -> bool:  # a lookup, not a read of the record
        return task in self.at

    def __iter__(self):
        return iter(self.at)

    def __len__(self) -> int:
        return len(self.at)


def swap_partners(
    rubrics: Records, weights: dict[str, int] | None = None, questions: Records | None = None
) -> Mapping[str, tuple[str, list[dict], list[dict], list[dict]]]:
    """task id -> (persona id, aspects, profile, preferences) of its contrasting user: in
    mutual couples of the same category, most conflicting first (pipeline/contrast.py
    `partners`, each dimension counting its `weights`). A user of
    several questions stands for the couple with its first question's aspects, first in the
    questions stage's order: the same every run (it was the first to finish planning, so two
    builds of one config could swap in different answers)."""
    users, held = {}, {}
    file = getattr(rubrics, "file", None)  # a plain list (tests): held in memory
    for rec in rubrics:
        p = rec.task.persona
        if file is None:
            held[rec.task.task_id] = partner_of(rec)
        users[rec.task.task_id] = User(
            key=p.persona_id,
            category=p.category,
            aspects=" ".join(a.aspect for a in rec.rubric_aspects),
            levels={f.dimension: f.level for f in p.preferences},
            profile=rec.task.task_id,
        )
    order = task_order(questions)
    users = dict(sorted(users.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))
    found = partners(users, weights)
    if file is None:
        return {task: held[other.profile] for task, other in found.items()}
    offsets = rubrics.index()
    return SwapPartners(file, {task: offsets[other.profile] for task, other in found.items()})


class Writer:
    """What writes a run's pairs: its prompts, strategies, generator and swap partners."""

    def __init__(self, ctx: RunContext, rubrics: Records):
        self.ctx = ctx
        questions = ctx.read(Task)  # the order users are coupled in (task_order)
        g = ctx.cfg.generation
        self.prompts = {role: load_prompt(t) for role, t in tasks_of(ctx.cfg).items()}
        self.versions = {p.task: p.ref for p in self.prompts.values()}
        self.model = ctx.cfg.model.generator
        self.budget = g.word_budget
        if g.design == REWRITE:  # every pair contrasts two users on what a rewrite realises
            self.directions = self.prompts["chosen"].extra["directions"]
            self.signs = self.prompts["chosen"].extra.get("signs", {})
            self.per_pair = g.dimensions_per_pair
            self.dimensions = g.dimensions
            self.names = [CONTRAST]
            self.partners = swap_partners(rubrics, dict.fromkeys(g.dimensions, 100), questions)
            return
        self.instructions = self.prompts["rejected"].extra["strategies"]
        self.names = strategies(ctx.cfg, self.prompts["rejected"])
        self.partners = swap_partners(rubrics, None, questions) if SWAP in self.names else {}
        # a swap task with nobody to swap with takes one of these instead
        self.others = [n for n in self.names if n != SWAP]
        self.others = self.others or [n for n in self.instructions if n != SWAP]

    async def ask(self, role: str, max_tokens: int | None = None, **variables):
        return await self.ctx.llm.call(
            self.prompts[role],
            stage=STAGE.name,
            model=self.model,
            variables=variables,
            max_tokens=max_tokens,
        )

    def common(self, task: Task, aspects, key_points: list[str]) -> dict:
        """What every answer prompt of a task is given (each uses what it needs)."""
        return {
            "question": task.question,
            "key_points": key_points,
            "aspects": [a.model_dump() for a in aspects],
            "word_budget": self.budget,
            "profile": [i.model_dump() for i in task.profile],
        }

    async def swapped(self, common: dict, aspects_b: list[dict], profile_b: list[dict]):
        """The chosen prompt's answer for the swap partner: same question, key points, budget."""
        partner = common | {"aspects": aspects_b, "profile": profile_b}
        return await self.ask("chosen", budget_tokens(self.budget), **partner)

    async def pair(self, rec: RubricRecord) -> Pair | Dropped:
        """A task's pair: its content plan, then chosen, then rejected by its strategy."""
        if self.names == [CONTRAST]:
            return await self.contrasted(rec)
        task, seed = rec.task, self.ctx.cfg.seed
        strategy, rejected_for = pick_strategy(task.task_id, self.names, seed), None
        if strategy == SWAP and task.task_id not in self.partners:  # nobody to swap with
            strategy = pick_strategy(task.task_id, self.others, seed)
        try:
            plan = None
            if "content_plan" in self.prompts:
                plan = await self.ask("content_plan", question=task.question)
            key_points = plan.value.key_points if plan else []
            common = self.common(task, rec.rubric_aspects, key_points)
            chosen = await self.ask("chosen", budget_tokens(self.budget), **common)
            if strategy == SWAP:
                rejected_for, aspects_b, profile_b, _ = self.partners[task.task_id]
                rejected = await self.swapped(common, aspects_b, profile_b)
            else:
                instruction = self.instructions[strategy]
                rejected = await self.ask(
                    "rejected",
                    budget_tokens(self.budget),
                    **common,
                    strategy=strategy,
                    strategy_instruction=instruction,
                )
        except LLMError as e:  # a PermanentLLMError is not one: the run stops
            return Dropped(
                stage=STAGE.name, id=task.task_id, reason=f"generator_{e.kind}", detail=e.detail
            )
        return Pair(
            pair_id=self.pair_id(task),
            task=task,
            rubric_aspects=rec.rubric_aspects,
            narrative=rec.narrative,
            key_points=key_points,
            chosen=chosen.value,
            rejected=rejected.value,
            rejected_strategy=strategy,
            rejected_for=rejected_for,
            generator_model=self.model,
            prompt_versions=self.versions,
            calls=({"content_plan": plan.key} if plan else {})
            | {"chosen": chosen.key, "rejected": rejected.key},
        )

    def pair_id(self, task: Task) -> str:
        # hashed from the whole profile, as released: with profile.top_k the prompts saw a
        # selection that the release does not carry, and `prb release verify` recomputes the id
        released = [i.model_dump() for i in task.persona.profile]
        return pair_id(task.persona.persona_id, task.question, released, self.versions)

    async def contrasted(self, rec: RubricRecord) -> Pair | Dropped:
        """The rewrite design: one base answer, rewritten for the user (chosen) and for the
        contrasting user (rejected), one instruction per dimension on which they differ, with
        each user's own words; kept if at least one difference shows in the text."""
        task = rec.task

        def dropped(reason: str, detail: str) -> Dropped:
            return Dropped(stage=STAGE.name, id=task.task_id, reason=reason, detail=detail)

        if task.task_id not in self.partners:
            return dropped("no_contrast", f"{task.persona.persona_id} has nobody to contrast")
        other, _, _, prefs_b = self.partners[task.task_id]
        mine = {p.dimension: (p.level, p.statement) for p in task.persona.preferences}
        theirs = {p["dimension"]: (p["level"], p["statement"]) for p in prefs_b}
        dims = [
            d
            for d in self.dimensions
            if d in mine
            and d in theirs
            and mine[d][0] != theirs[d][0]
            and {mine[d][0], theirs[d][0]} <= set(self.directions[d])
        ][: self.per_pair]
        if not dims:
            return dropped(
                "no_contrast",
                f"{task.persona.persona_id} and {other} differ on none of {self.dimensions}",
            )
        side = {"question": task.question, "word_budget": self.budget}
        tokens = budget_tokens(self.budget)

        def told(who: dict) -> dict:
            return {
                "statements": [who[d][1] for d in dims],
                "instructions": [self.directions[d][who[d][0]] for d in dims],
            }

        try:
            base = await self.ask("base_answer", tokens, **side)
            side["base"] = base.value
            # asked together, so they queue side by side: the server's prompt cache reuses
            # the evaluated system message, base answer and question of the first for the second
            chosen, rejected = await asyncio.gather(
                self.ask("chosen", tokens, **side, **told(mine)),
                self.ask("rejected", tokens, **side, **told(theirs)),
            )
        except LLMError as e:
            return dropped(f"generator_{e.kind}", e.detail)
        texts = (unwrap(chosen.value, "answer"), unwrap(rejected.value, "answer"))
        for name, text, who in (("chosen", texts[0], mine), ("rejected", texts[1], theirs)):
            if said := echoed(text, told(who)["instructions"]):
                return dropped("instructions_echoed", f"{name} repeats its instruction: {said!r}")
        differences = [
            Difference(
                dimension=d,
                chosen=mine[d][0],
                rejected=theirs[d][0],
                realised=realised(d, (mine[d][0], theirs[d][0]), texts, self.signs.get(d)),
            )
            for d in dims
        ]
        if not any(x.realised for x in differences):
            shown = ", ".join(f"{x.dimension} {x.chosen}/{x.rejected}" for x in differences)
            return dropped("difference_not_realised", f"none of {shown} shows in the text")
        return Pair(
            pair_id=self.pair_id(task),
            task=task,
            rubric_aspects=rec.rubric_aspects,
            narrative=rec.narrative,
            key_points=[],
            chosen=texts[0],
            rejected=texts[1],
            rejected_strategy=CONTRAST,
            rejected_for=other,
            generator_model=self.model,
            prompt_versions=self.versions,
            calls={"base_answer": base.key, "chosen": chosen.key, "rejected": rejected.key},
            differences=differences,
        )

    async def rewrite(self, pair: Pair, found) -> Pair | None:
        """The pair with its rejected answer asked again by persona_swap (the gate found it
        leaking); None if that call failed."""
        _, aspects_b, profile_b, _ = partner = self.partners[pair.task.task_id]
        common = self.common(pair.task, pair.rubric_aspects, pair.key_points)
        try:
            answer = await self.swapped(common, aspects_b, profile_b)
        except LLMError:  # the pair keeps its first answer; the gate's second half decides
            return None
        return pair.model_copy(
            update={
                "rejected": answer.value,
                "rejected_strategy": SWAP,
                "rejected_for": partner[0],
                "calls": pair.calls
                | {"rejected": answer.key, "first_rejected": pair.calls["rejected"]},
                "rewritten": Rewritten(
                    strategy=pair.rejected_strategy,
                    rejected=pair.rejected,
                    probability=found.probability,
                    round=found.round,
                ),
            }
        )


async def run(ctx: RunContext, rubrics: Records) -> StageReport:
    writer = Writer(ctx, rubrics)
    await process_stage(STAGE, rubrics, ctx.run_dir, writer.pair)
    # (a run of persona_swap alone has nothing to rewrite: its other pairs have no partner)
    rewrite_on = ctx.cfg.generation.rewrite_artifacts and ctx.cfg.filters.artifact_gate
    found = {}
    if rewrite_on and not set(writer.names) <= {SWAP, CONTRAST}:
        writer.partners = writer.partners or swap_partners(rubrics, None, ctx.read(Task))
        with timed(ctx.seconds, "pairs: artifact gate and its rewrites"):
            found = await rewrite_artifacts(ctx, rubrics, writer.partners, writer.rewrite)
    report = model_stage_done(STAGE, ctx, rubrics)
    report.changed = found
    return report


def first_written(pair: Pair) -> Pair:
    """The pair as the stage first wrote it, before any rewrite: what the gate's first half
    judges, so that a resumed run decides alike."""
    if pair.rewritten is None:
        return pair
    return pair.model_copy(
        update={
            "rejected": pair.rewritten.rejected,
            "rejected_for": None,
            "rejected_strategy": pair.rewritten.strategy,
        }
    )


async def rewrite_artifacts(ctx: RunContext, rubrics: Records, partners: dict, rewrite) -> dict:
    """AFLite over the pairs as first written (every confident pair each round: a rewrite loses
    nothing); the pairs of each picked pair's user and of its swap partner that are not swaps
    already are rewritten. Returns what has been rewritten, by the replaced answer's strategy."""
    from pipeline.checks.artifact import aflite, row

    gate = ctx.cfg.filters
    pairs = STAGE.outputs(ctx.run_dir, rubrics)
    rows, done, texts = [], Counter(), {}
    for p in pairs:  # texts and ids only, never whole pairs
        rows.append(row(first_written(p), texts))
        if p.rewritten is not None:
            done[p.rewritten.strategy] += 1
    if len(rows) >= gate.artifact_min_pairs:
        found = dict(
            zip((r["id"] for r in rows), aflite(rows, gate, max_drop=1.0, every=True), strict=True)
        )
        # a picked pair's user and that user's partner are rewritten whole: persona_swap is
        # symmetric only couple by couple (each user's answers as often chosen as rejected)
        couples = set()
        for p in pairs:
            if found[p.pair_id].removed and p.task.task_id in partners:
                couples |= {p.task.persona.persona_id, partners[p.task.task_id][0]}
        todo = [
            o
            for o, p in pairs.items()
            if p.task.persona.persona_id in couples
            and p.rewritten is None
            and p.rejected_strategy != SWAP
            and p.task.task_id in partners
        ]
        with STAGE.file(ctx.run_dir).appender() as append:
            for start in range(0, len(todo), RECORDS_IN_FLIGHT):
                chunk = pairs.file.read_at(todo[start : start + RECORDS_IN_FLIGHT])
                news = await asyncio.gather(*(rewrite(p, found[p.pair_id]) for p in chunk))
                for new in news:
                    if new is not None:  # an id's latest line is the pair from now on
                        append(new)
                        done[new.rewritten.strategy] += 1
    return {f"{name} rewritten as {SWAP}": n for name, n in sorted(done.items())}


_ASPECTS = [{"aspect": "An aspect", "evidence": "[p1] 'sample'", "reason": "A reason."}]
_COMMON = {
    "question": "A question?",
    "key_points": ["A point."],
    "aspects": _ASPECTS,
    "word_budget": 100,
    "profile": [{"id": "p1", "category": "sample", "text": "A sample post."}],
}
_SAMPLES = {
    "content_plan": {"question": "A question?"},
    "chosen": _COMMON,
    "rejected": {**_COMMON, "strategy": "a_strategy", "strategy_instruction": "An instruction."},
}
_REWRITE = {
    "base_answer": {"question": "A question?", "word_budget": 100},
    "rewrite": {
        "question": "A question?",
        "word_budget": 100,
        "base": "An answer.",
        "statements": ["A preference in the user's words."],
        "instructions": ["An instruction."],
    },
}


def preflight(cfg) -> None:
    """The rejected prompt's strategies table holds every strategy the config names."""
    rejected = load_prompt(cfg.generation.rejected_prompt)
    known = rejected.extra.get("strategies", {})
    unknown = sorted(set(cfg.generation.strategies or ()) - set(known))
    if not known:
        raise PromptError(f"{rejected.path}: has no `strategies:` table (name at least one)")
    if unknown:
        raise PromptError(
            f"{rejected.path}: config generation.strategies names {unknown}, "
            f"which the prompt's strategies table does not define"
        )


def configured(cfg) -> dict[str, dict]:
    if cfg.generation.design == REWRITE:
        return _REWRITE
    return {task: _SAMPLES[role] for role, task in tasks_of(cfg).items()}


STAGE = Stage(
    name="pairs",
    reads=(RubricRecord, Task),
    input_id=lambda r: r.task.task_id,
    output=Pair,
    output_id=lambda p: p.task.task_id,
    run=run,
    preflight=preflight,
    role="generator",
    tasks=TASKS,
    # first_rejected: the answer the gate had rewritten
    calls=("content_plan", "base_answer", "chosen", "rejected", "first_rejected"),
    samples={**_SAMPLES, **_REWRITE},
    configured=configured,
    funnel="pairs",
    about="{generation}, each ≤ {budget} words",
)
