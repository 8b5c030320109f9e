"""The rejected prompt's strategies (its `strategies:` table: `wrong_tone`, `lexical_decoy`, …,
and the instructions plugins add): from the shared content plan, the rejected prompt told the
aspects to miss and the strategy's one instruction."""

from __future__ import annotations

from pipeline.calls import LLMError
from pipeline.strategies.base import StrategySpec


async def write(w, rec, name: str):
    try:
        first = await w.planned(rec)
        rejected = await w.ask(
            "rejected",
            w.tokens,
            **first.common,
            strategy=name,
            strategy_instruction=w.instructions[name],
        )
    except LLMError as e:  # a PermanentLLMError is not one: the run stops
        return w.failed(rec, e)
    return w.made(rec, name, first, rejected)


STRATEGY = StrategySpec(
    "instructed",
    "the rejected prompt, told the aspects to miss and this named way to miss them",
    write,
)
