"""Reward-model adapters for `prb eval`, behind one small interface.

A reward model ranks candidate answers to one user's question. Pointwise models implement
`score_many` (one float per (context, question, answer)); pairwise models implement `prefer`
(which of two answers). `rank` gives one score per candidate either way: pointwise scores, or
for pairwise models the number of wins over every ordered pair of candidates, so each A/B
order is asked. Adapters: LLM judges (any OpenAI-compatible endpoint, through pipeline/llm/),
a Hugging Face sequence classifier (extra `hf`), and baselines (random, longer-wins, lexical
profile overlap). Each adapter says how it is named on the command line (`kind`, `help`) and
parses its own options (`from_spec`); pipeline/eval/models.py is the table of them.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from dataclasses import dataclass, field

from pipeline.calls import LLMError
from pipeline.errors import PrbError
from pipeline.llm.client import LLM
from pipeline.llm.prompts import Prompt, load_prompt
from pipeline.records import stable_id
from pipeline.release.load import CONTEXT_MODES, user_context  # noqa: F401  (their home)
from pipeline.stats import word_count
from pipeline.text import content_words


class SpecError(PrbError, ValueError):
    """A `--rm` spec that cannot be used; the message names the spec."""


@dataclass(frozen=True)
class Query:
    context: str
    question: str
    response: str


@dataclass(frozen=True)
class SpecEnv:
    """What a `--rm` spec is built against: the model client, the default judge, the default
    user-context mode."""

    llm: LLM | None
    judge_model: str
    context: str = "profile"
    protocol: str = "prb"  # pipeline/eval/protocol.py
    public_prompts: str | None = None  # the public repository's clone (protocol published)


def checked(scores, n: int) -> tuple[list[float | None], dict[int, str]]:
    """A reward model's scores for `n` items, each a finite float or None with its reason: a
    missing score, NaN or ±inf is an error, never a win, a loss or a bare NaN in a JSON file.
    (None stays None: an adapter's "could not score", e.g. too long for its context.)"""
    scores = list(scores)
    out: list[float | None] = []
    errors: dict[int, str] = {}
    for k in range(n):
        if k >= len(scores):
            out.append(None)
            errors[k] = f"the model returned {len(scores)} scores for {n} items"
            continue
        if scores[k] is None:
            out.append(None)
            continue
        try:
            value = float(scores[k])
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            out.append(None)
            errors[k] = f"the model's score is {scores[k]!r}, not a finite number"
        else:
            out.append(value)
    return out, errors


@dataclass
class RewardModel:
    """Base: `kind` names the adapter, `context` the user-context mode it is given."""

    kind: str = ""
    context: str = "profile"
    options: dict = field(default_factory=dict)  # what the spec set, recorded in results
    protocol: str = "prb"
    pairwise = False  # answers prefer(); rank() asks every ordered pair
    batched = False  # local model: score_many over a whole release at once

    @classmethod
    def from_spec(cls, kind: str, options: dict, positional: list[str], env: SpecEnv):
        """The adapter for `KIND[:ARG][,key=value...]` (options parsed, context resolved)."""
        return cls(kind, options.get("context", env.context), options, env.protocol)

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

    @classmethod
    def from_spec(cls, kind, options, positional, env):
        return cls(
            kind,
            options.get("context", env.context),
            options,
            env.protocol,
            seed=int(options.get("seed", 0)),
        )

    async def score_many(self, queries):
        return [
            random.Random(stable_id(self.seed, q.question, q.response)).random() for q in queries
        ]


@dataclass
class LengthRM(RewardModel):
    """Longer wins: the score is the answer's word count."""

    batched = True

    async def score_many(self, queries):
        return [float(word_count(q.response)) for q in queries]


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
    """An LLM judge through pipeline/llm/: pointwise (1-10 score) or pairwise (A/B/tie).

    Its prompt fits the context window (option `context_window=N`, else the config's
    `model.context_window`, else the server's own figure when it gives one: vLLM's
    `max_model_len`; unknown: sent whole) with the judge's
    `max_tokens` to spare: the question and the answers always go in whole, the user context is
    cut by whole lines from its end (posts come best first), and a prompt that does not fit
    with no context is an error row. `truncation` counts it, as the HF models' does."""

    llm: LLM | None = None
    model: str = ""
    stage: str = "eval"
    window: int | None = None  # tokens (`context_window=N`); None: the config's or endpoint's
    prompt: Prompt | None = None  # None: prb's own (prompts/rm_*.yaml)

    def __post_init__(self):
        if self.prompt is None:
            self.prompt = load_prompt("rm_pairwise" if self.pairwise else "rm_pointwise")
        self.unparsed = 0  # verdicts the published protocol had to read as A

    @classmethod
    def from_spec(cls, kind, options, positional, env):
        if env.llm is None:
            raise SpecError(f"--rm {kind}: an LLM judge needs an endpoint")
        if env.protocol == "published" and not cls.pairwise:
            raise SpecError(
                f"--rm {kind}: the published protocol has no pointwise LLM judge "
                "(its scripts score with a reward model or a pairwise judge): use "
                "hf:PATH or judge-pair, or --protocol prb"
            )
        prompt = None
        if env.protocol == "published":
            from pipeline.eval.protocol import load_public_prompts

            prompt = load_public_prompts(env.public_prompts)
        model = options.get("model") or (positional[0] if positional else env.judge_model)
        options = {**options, "model": model}
        window = options.get("context_window")
        if window is not None and not window.isdigit():
            raise SpecError(f"--rm {kind}: context_window={window}: give a number of tokens")
        return cls(
            kind,
            options.get("context", env.context),
            options,
            env.protocol,
            llm=env.llm,
            model=model,
            window=int(window) if window else None,
            prompt=prompt,
        )

    @property
    def truncation(self) -> dict:
        return dict(self.llm.truncation[self.stage])

    async def ask(self, variables: dict):
        """One call, the prompt fitted to the window by the one rule (pipeline/llm/window.py)."""
        return await self.llm.call(
            self.prompt,
            stage=self.stage,
            model=self.model,
            variables=variables,
            fit="user_context",
            window=self.window,
        )

    async def score_many(self, queries):
        async def one(q: Query):
            return await self.ask(
                {"user_context": q.context, "question": q.question, "answer": q.response}
            )

        results = await asyncio.gather(*(one(q) for q in queries))
        return [r.value.score for r in results]


@dataclass
class PairwiseJudgeRM(JudgeRM):
    pairwise = True

    async def prefer(self, context, question, a, b):
        if self.protocol == "published":
            return await self._public_prefer(question, a, b)
        result = await self.ask(
            {"user_context": context, "question": question, "answer_a": a, "answer_b": b}
        )
        return result.value.choice

    async def _public_prefer(self, question, a, b):
        """The public scorer's prompt and reading: no user context and no fitting (its own
        scripts send the prompt whole); no verdict found, or an empty or cut-off answer: A."""
        from pipeline.eval.protocol import public_verdict

        try:
            result = await self.llm.call(
                self.prompt,
                stage=self.stage,
                model=self.model,
                variables={"question": question, "Response_A": a, "Response_B": b},
            )
            verdict = public_verdict(result.value)
        except LLMError as e:
            if e.kind not in ("unparseable", "cut_off"):
                raise
            verdict = None
        if verdict is None:
            self.unparsed += 1
            return "A"
        return verdict

    async def score_many(self, queries):
        raise NotImplementedError("a pairwise judge compares answers; use prefer() or rank()")
