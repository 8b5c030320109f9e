"""Stage 4 — pairs: per task, a chosen and a rejected answer that differ only in fit to the
user, written by the task's rejected strategy (pipeline/strategies/: picked per task, seeded).
The planned ones share a content plan: chosen follows every aspect, rejected keeps the key
points and word budget and misses the aspects, by a named instruction (the `strategies:` table
of prompts/rejected.yaml) or as the answer a contrasting user gets (`persona_swap`); the rewrite
design rewrites one base answer for each of two users (`persona_rewrite`). Equal general quality
comes from what the two share; the filters stage checks it held. This stage knows no strategy:
it hands each a `Writer` (the prompts, the generator, the users' partners and the tools to
write a pair with).

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
from dataclasses import dataclass

from pipeline.calls import LLMError
from pipeline.contrast import User, partners
from pipeline.llm.prompts import PromptError, load_prompt
from pipeline.meter import timed
from pipeline.records import (
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
from pipeline.strategies import known, spec
from pipeline.strategies.persona_swap import answer_for_partner

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
    """The configured strategies, or every strategy the rejected prompt defines; the rewrite
    design's default is its own (persona_rewrite)."""
    if cfg.generation.design == REWRITE:
        return cfg.generation.strategies or [CONTRAST]
    return cfg.generation.strategies or list(prompt.extra["strategies"])


# what the artifact gate rewrites a leaking rejected answer with: the answer a contrasting user
# gets, from the same distribution as chosen by construction (pipeline/strategies/persona_swap.py)
REWRITE_WITH = "persona_swap"


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


@dataclass
class Planned:
    """A planned task's shared part: its content plan (None without one), key points, the
    variables every answer prompt gets, and the chosen answer."""

    plan: object | None
    key_points: list[str]
    common: dict
    chosen: object


class Writer:
    """What writes a run's pairs: its prompts, generator and swap partners, and the tools a
    strategy (pipeline/strategies/) writes a pair with. It picks each task's strategy and
    knows none of them."""

    def __init__(self, ctx: RunContext, rubrics: Records):
        self.ctx = ctx
        questions = ctx.read(Task)  # the order users are coupled in (task_order)
        g = ctx.cfg.generation
        self.prompts = {role: load_prompt(t) for role, t in tasks_of(ctx.cfg).items()}
        self.versions = {p.task: p.ref for p in self.prompts.values()}
        self.model = ctx.cfg.model.generator
        self.budget = g.word_budget
        self.tokens = budget_tokens(g.word_budget)
        self.instructions = self.prompts["rejected"].extra.get("strategies", {})
        self.names = strategies(ctx.cfg, self.prompts["rejected"])
        self.specs = {n: spec(n, self.instructions) for n in self.names}
        self.rubrics, self._said = rubrics, None
        coupled = [s for s in self.specs.values() if s.partnered]
        self.partners = swap_partners(rubrics, coupled[0].couples(g), questions) if coupled else {}
        # a task with nobody to contrast takes one of these instead
        alone = [n for n in self.names if not self.specs[n].partnered]
        self.others = alone or [
            n for n in self.instructions if not spec(n, self.instructions).partnered
        ]

    def said(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """(dimension, level) -> (persona id, statement) of every user of the run who states
        that level on one of the recipe's dimensions, by persona id: what users on each level
        said, in their own words (read once, when first asked)."""
        if self._said is None:
            dims, found = set(self.ctx.cfg.generation.dimensions), {}
            for rec in self.rubrics:
                for p in rec.task.persona.preferences:
                    if p.dimension in dims:
                        key = (p.dimension, p.level)
                        found.setdefault(key, {})[rec.task.persona.persona_id] = p.statement
            self._said = {k: sorted(v.items()) for k, v in found.items()}
        return self._said

    async def ask(
        self, role: str, max_tokens: int | None = None, sampling: dict | None = None, **variables
    ):
        """One call of the recipe's `role` prompt; `sampling` replaces its request parameters
        (a temperature)."""
        prompt = self.prompts[role]
        return await self.ctx.llm.call(
            prompt.with_params(**sampling) if sampling else prompt,
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

    async def planned(self, rec: RubricRecord) -> Planned:
        """The task's content plan (if the recipe has one), then its chosen answer."""
        plan = None
        if "content_plan" in self.prompts:
            plan = await self.ask("content_plan", question=rec.task.question)
        key_points = plan.value.key_points if plan else []
        common = self.common(rec.task, rec.rubric_aspects, key_points)
        chosen = await self.ask("chosen", self.tokens, **common)
        return Planned(plan, key_points, common, chosen)

    def made(
        self, rec: RubricRecord, name: str, first: Planned, rejected, rejected_for=None
    ) -> Pair:
        """A planned task's pair, its rejected answer written by strategy `name`."""
        plan = first.plan
        return Pair(
            pair_id=self.pair_id(rec.task),
            task=rec.task,
            rubric_aspects=rec.rubric_aspects,
            narrative=rec.narrative,
            key_points=first.key_points,
            chosen=first.chosen.value,
            rejected=rejected.value,
            rejected_strategy=name,
            rejected_for=rejected_for,
            generator_model=self.model,
            prompt_versions=self.versions,
            calls=({"content_plan": plan.key} if plan else {})
            | {"chosen": first.chosen.key, "rejected": rejected.key},
        )

    def dropped(self, rec: RubricRecord, reason: str, detail: str, **more) -> Dropped:
        return Dropped(stage=STAGE.name, id=rec.task.task_id, reason=reason, detail=detail, **more)

    def failed(self, rec: RubricRecord, e: LLMError) -> Dropped:
        return self.dropped(rec, f"generator_{e.kind}", e.detail)

    async def write(self, rec: RubricRecord) -> Pair | Dropped:
        """A task's pair, by its strategy (seeded per task)."""
        task, seed = rec.task, self.ctx.cfg.seed
        name = pick_strategy(task.task_id, self.names, seed)
        if self.specs[name].partnered and task.task_id not in self.partners and self.others:
            name = pick_strategy(task.task_id, self.others, seed)  # nobody to contrast
        return await spec(name, self.instructions).write(self, rec, name)

    def pair_id(self, task: Task) -> str:
        # hashed from the whole profile, as released: with profile.top_k the prompts saw a
        # selection that the release does not carry, and `prb release verify` recomputes the id
        released = [i.model_dump() for i in task.persona.profile]
        return pair_id(task.persona.persona_id, task.question, released, self.versions)

    async def rewrite(self, pair: Pair, found) -> Pair | None:
        """The pair with its rejected answer asked again by persona_swap (the gate found it
        leaking); None if that call failed."""
        common = self.common(pair.task, pair.rubric_aspects, pair.key_points)
        try:
            other, answer = await answer_for_partner(self, pair.task, common)
        except LLMError:  # the pair keeps its first answer; the gate's second half decides
            return None
        return pair.model_copy(
            update={
                "rejected": answer.value,
                "rejected_strategy": REWRITE_WITH,
                "rejected_for": other,
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
    await process_stage(STAGE, rubrics, ctx.run_dir, writer.write)
    # (a run of partnered strategies alone has nothing to rewrite: its other pairs have none)
    # the gate's rewrite (persona_swap's chosen prompt) is the plan design's: under the
    # rewrite design a leaking pair is left to the gate's second half, which drops it
    g = ctx.cfg.generation
    rewrite_on = g.rewrite_artifacts and ctx.cfg.filters.artifact_gate and g.design != REWRITE
    found = {}
    if rewrite_on and any(not s.partnered for s in writer.specs.values()):
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
            and p.rejected_for is None  # written for no one yet
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
    return {f"{name} rewritten as {REWRITE_WITH}": n for name, n in sorted(done.items())}


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
    """Every strategy the config names is a strategy module or in the rejected prompt's
    `strategies:` table, and writes with the config's design (a plan strategy has no rewrite
    to write, a rewrite strategy no content plan)."""
    g = cfg.generation
    rejected = load_prompt(g.rejected_prompt)
    table = rejected.extra.get("strategies", {}) if g.design != REWRITE else {}
    unknown = sorted(set(g.strategies or ()) - set(known(table)))
    if not table and not g.strategies and g.design != REWRITE:
        raise PromptError(f"{rejected.path}: has no `strategies:` table (name at least one)")
    if unknown:
        where = "pipeline/strategies" if g.design == REWRITE else f"{rejected.path}"
        raise PromptError(
            f"{where}: config generation.strategies names {unknown}, which neither the "
            f"rejected prompt's strategies table nor pipeline/strategies/ defines for "
            f"generation.design {g.design} (known: {', '.join(known(table))})"
        )
    other = [n for n in g.strategies or () if spec(n, table).design != g.design]
    if other:
        raise PromptError(
            f"config generation.strategies names {other}, which write with another "
            f"generation.design than {g.design}: name strategies of that design"
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
