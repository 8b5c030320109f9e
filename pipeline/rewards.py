"""Reward-model adapters for `prb eval`, behind one small interface.

A reward model ranks candidate answers to one user's question. Pointwise models implement
`score_many` (one float per (context, question, answer)); pairwise models implement `prefer`
(which of two answers). `rank` gives one score per candidate either way: pointwise scores, or
for pairwise models the number of wins over every ordered pair of candidates, so each A/B
order is asked. Adapters: LLM judges (any OpenAI-compatible endpoint, through pipeline/llm.py),
a Hugging Face sequence classifier (extra `hf`), and baselines (random, longer-wins, lexical
profile overlap). `parse_spec` turns a `--rm` string into an adapter.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from dataclasses import dataclass, field

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from pipeline.errors import PrbError
from pipeline.llm import LLM, LLMError
from pipeline.prompts import load_prompt
from pipeline.records import stable_id

CONTEXT_MODES = ("profile", "aspects", "narrative", "none")
_WORD = re.compile(r"[a-z][a-z'-]+")


class SpecError(PrbError, ValueError):
    """A `--rm` spec that cannot be used; the message names the spec."""


def user_context(row: dict, mode: str) -> str:
    """The user context a reward model sees, rendered from one release row."""
    if mode == "profile":
        return "\n".join(f"[{p['id']}] {p['text']}" for p in row["profile"])
    if mode == "aspects":
        return "\n".join(f"{i}. {a['aspect']}" for i, a in enumerate(row["rubric_aspects"], 1))
    if mode == "narrative":
        return row["narrative"] or ""
    if mode == "none":
        return ""
    raise SpecError(f"unknown context mode {mode!r}; use one of {', '.join(CONTEXT_MODES)}")


@dataclass(frozen=True)
class Query:
    context: str
    question: str
    response: str


@dataclass
class RewardModel:
    """Base: `kind` names the adapter, `context` the user-context mode it is given."""

    kind: str = ""
    context: str = "profile"
    options: dict = field(default_factory=dict)  # what the spec set, recorded in results
    pairwise = False  # answers prefer(); rank() asks every ordered pair
    batched = False  # local model: score_many over a whole release at once

    @property
    def name(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()) if k != "context")
        return f"{self.kind}{'(' + extra + ')' if extra else ''}/{self.context}"

    async def score_many(self, queries: list[Query]) -> list[float]:
        raise NotImplementedError

    async def score(self, context: str, question: str, response: str) -> float:
        return (await self.score_many([Query(context, question, response)]))[0]

    async def prefer(self, context: str, question: str, a: str, b: str) -> str:
        """'A', 'B' or 'tie'. Pointwise models compare their scores."""
        sa, sb = await self.score_many([Query(context, question, a), Query(context, question, b)])
        return "A" if sa > sb else "B" if sb > sa else "tie"

    async def rank(self, context: str, question: str, candidates: list[str]) -> list[float]:
        if not self.pairwise:
            return await self.score_many([Query(context, question, c) for c in candidates])
        wins = [0.0] * len(candidates)
        pairs = list(itertools.permutations(range(len(candidates)), 2))  # both A/B orders
        verdicts = await asyncio.gather(
            *(self.prefer(context, question, candidates[i], candidates[j]) for i, j in pairs)
        )
        for (i, j), v in zip(pairs, verdicts, strict=True):
            if v == "A":
                wins[i] += 1
            elif v == "B":
                wins[j] += 1
            else:
                wins[i] += 0.5
                wins[j] += 0.5
        return wins

    def close(self) -> None:
        pass


# --- baselines --------------------------------------------------------------------------------


@dataclass
class RandomRM(RewardModel):
    """A seeded random score per (seed, question, response): chance level, order-independent."""

    batched = True

    seed: int = 0

    async def score_many(self, queries):
        return [
            random.Random(stable_id(self.seed, q.question, q.response)).random() for q in queries
        ]


@dataclass
class LengthRM(RewardModel):
    """Longer wins: the score is the answer's word count."""

    batched = True

    async def score_many(self, queries):
        return [float(len(q.response.split())) for q in queries]


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS and len(w) > 2}


@dataclass
class OverlapRM(RewardModel):
    """Profile similarity: the share of the answer's content words that occur in the context."""

    batched = True

    async def score_many(self, queries):
        out = []
        for q in queries:
            words = content_words(q.response)
            out.append(len(words & content_words(q.context)) / len(words) if words else 0.0)
        return out


# --- LLM judges -------------------------------------------------------------------------------


@dataclass
class JudgeRM(RewardModel):
    """An LLM judge through pipeline/llm.py: pointwise (1-10 score) or pairwise (A/B/tie)."""

    llm: LLM | None = None
    model: str = ""
    stage: str = "eval"

    def __post_init__(self):
        self.prompt = load_prompt("rm_pairwise" if self.pairwise else "rm_pointwise")

    async def score_many(self, queries):
        results = await asyncio.gather(
            *(
                self.llm.call(
                    self.prompt,
                    stage=self.stage,
                    model=self.model,
                    variables={
                        "user_context": q.context,
                        "question": q.question,
                        "answer": q.response,
                    },
                )
                for q in queries
            )
        )
        return [r.value.score for r in results]


@dataclass
class PairwiseJudgeRM(JudgeRM):
    pairwise = True

    async def prefer(self, context, question, a, b):
        result = await self.llm.call(
            self.prompt,
            stage=self.stage,
            model=self.model,
            variables={"user_context": context, "question": question, "answer_a": a, "answer_b": b},
        )
        return result.value.choice

    async def score_many(self, queries):
        raise NotImplementedError("a pairwise judge compares answers; use prefer() or rank()")


# --- specs ------------------------------------------------------------------------------------

KINDS = {
    "random": "seeded random score (option seed=N)",
    "length": "longer answer wins",
    "overlap": "lexical overlap between the user context and the answer",
    "judge": "LLM judge, pointwise 1-10 (option model=NAME; default the config's judge)",
    "judge-pair": "LLM judge, pairwise, both A/B orders (option model=NAME)",
    "hf": "Hugging Face sequence classifier: hf:PATH_OR_ID (options device, batch_size)",
}


def parse_spec(spec: str, *, llm: LLM | None, judge_model: str, context: str) -> RewardModel:
    """`KIND[:ARG][,key=value...]`, e.g. `judge:context=none`, `judge-pair:model=gpt-4o`,
    `hf:./my-rm,device=cuda,batch_size=16`, `random:seed=3`."""
    kind, _, rest = spec.partition(":")
    if kind not in KINDS:
        raise SpecError(f"--rm {spec!r}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    options: dict[str, str] = {}
    positional = []
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if eq:
            options[key.strip()] = value.strip()
        else:
            positional.append(part.strip())
    ctx = options.get("context", context)
    if ctx not in CONTEXT_MODES:
        raise SpecError(f"--rm {spec!r}: context must be one of {', '.join(CONTEXT_MODES)}")
    try:
        if kind == "random":
            return RandomRM(kind, ctx, options, seed=int(options.get("seed", 0)))
        if kind == "length":
            return LengthRM(kind, ctx, options)
        if kind == "overlap":
            return OverlapRM(kind, ctx, options)
        if kind in ("judge", "judge-pair"):
            if llm is None:
                raise SpecError(f"--rm {spec!r}: an LLM judge needs an endpoint")
            model = options.get("model") or (positional[0] if positional else judge_model)
            options["model"] = model
            cls = PairwiseJudgeRM if kind == "judge-pair" else JudgeRM
            return cls(kind, ctx, options, llm=llm, model=model)
        path = options.get("path") or (positional[0] if positional else "")
        if not path:
            raise SpecError(f"--rm {spec!r}: give the model as hf:PATH_OR_ID")
        options["path"] = path
        from pipeline.hf_reward import HFRewardModel  # torch is an optional extra

        return HFRewardModel(
            kind,
            ctx,
            options,
            path=path,
            device=options.get("device", "auto"),
            batch_size=int(options.get("batch_size", 8)),
        )
    except ValueError as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError(f"--rm {spec!r}: {e}") from None


__all__ = ["LLMError", "RewardModel", "Query", "parse_spec", "user_context", "CONTEXT_MODES"]
