"""persona_swap: the rejected answer is the chosen prompt's answer for a contrasting user of
the same category (the same question and key points). Across a release chosen and rejected then
come from one distribution by construction, and nothing but fit to this user tells them apart."""

from __future__ import annotations

from pipeline.calls import LLMError
from pipeline.strategies.base import StrategySpec


async def answer_for_partner(w, task, common: dict):
    """The chosen prompt's answer for the task's partner: same question, key points, budget;
    returns (the partner's persona id, the answer)."""
    other, aspects, profile, _ = w.partners[task.task_id]
    answer = await w.ask("chosen", w.tokens, **(common | {"aspects": aspects, "profile": profile}))
    return other, answer


async def write(w, rec, name: str):
    try:
        first = await w.planned(rec)
        other, rejected = await answer_for_partner(w, rec.task, first.common)
    except LLMError as e:  # a PermanentLLMError is not one: the run stops
        return w.failed(rec, e)
    return w.made(rec, name, first, rejected, rejected_for=other)


STRATEGY = StrategySpec(
    "persona_swap",
    "the chosen prompt's answer for a contrasting user of the same category",
    write,
    couples=lambda generation: None,  # every preference dimension alike
)
