"""What a rejected strategy declares (`STRATEGY`): its name, what the card says of it, the
coroutine that writes a task's pair, and whether its rejected answer is written for a
contrasting user (then the pairs stage couples the users first), and which design it writes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StrategySpec:
    """A rejected strategy's declaration.

    `write(writer, rec, name)` writes the pair of one task (a `RubricRecord`) under strategy
    `name`, or says why not (a `Dropped`), with the tools of the pairs stage's `Writer`
    (pipeline/stages/pairs.py: `ask`, `planned`, `made`, `failed`, `dropped`, `partners`).
    `couples(generation_config)`: set when the rejected answer is written for a contrasting
    user; returns the weight of each preference dimension in choosing that user (None: every
    dimension alike, pipeline/contrast.py). A task with no one to contrast takes another
    strategy of the run, if it has one. `design`: the `generation.design` whose prompts it
    writes with (plan: content plan, chosen and rejected prompts; rewrite: one base answer
    rewritten for each side)."""

    name: str
    about: str
    write: Callable[[Any, Any, str], Awaitable[Any]]
    couples: Callable[[Any], dict[str, int] | None] | None = None
    design: str = "plan"

    @property
    def partnered(self) -> bool:
        return self.couples is not None
