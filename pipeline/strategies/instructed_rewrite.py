"""instructed_rewrite, the rewrite design's instructed strategy: the shared base answer
rewritten for the user (chosen) and for a stand-in who states another level of the user's own
preference (rejected: personas/taxonomy.yaml's `stand_ins`, with that level's instruction), on
the recipe's dimensions the user stated. No partner is needed: every user who states one of
the dimensions gets a pair, and the pair records the preference it breaks (`differences`).
Kept, like persona_rewrite's, only if a difference shows in the text (pipeline/realised.py).
"""

from __future__ import annotations

from functools import cache

from pipeline.personas.files import load_taxonomy
from pipeline.realised import visible
from pipeline.records import stable_id
from pipeline.strategies.base import StrategySpec
from pipeline.strategies.persona_rewrite import rewrite_pair, stated


def away(dimension: str, level: str, levels: list[str], seed: int, task_id: str) -> str | None:
    """The level a task's rejected side takes on `dimension`: one of `levels` that differs
    visibly from the user's (pipeline/realised.visible), picked by a seeded hash of the task;
    None if there is none."""
    other = [x for x in levels if x != level and visible(dimension, (level, x))]
    if not other:
        return None
    return other[int(stable_id(seed, task_id, dimension), 16) % len(other)]


def broken(g, directions: dict, stand_ins: dict, mine: dict, seed: int, task_id: str) -> dict:
    """dimension -> (level, statement) of the stand-in, on the recipe's dimensions the user
    stated with an instruction, at most `dimensions_per_pair`."""
    out = {}
    for d in g.dimensions:
        if len(out) == g.dimensions_per_pair:
            break
        if d not in mine or mine[d][0] not in directions.get(d, {}):
            continue
        levels = [x for x in directions[d] if x in stand_ins.get(d, {})]
        if (level := away(d, mine[d][0], levels, seed, task_id)) is not None:
            out[d] = (level, stand_ins[d][level])
    return out


@cache
def stand_ins() -> dict[str, dict[str, str]]:
    return load_taxonomy().stand_ins


async def write(w, rec, name: str):
    task = rec.task
    g = w.ctx.cfg.generation
    directions = w.prompts["rejected"].extra["directions"]
    mine = stated(task)
    theirs = broken(g, directions, stand_ins(), mine, w.ctx.cfg.seed, task.task_id)
    if not theirs:
        return w.dropped(
            rec,
            "no_preference_stated",
            f"{task.persona.persona_id} states none of {g.dimensions}",
        )
    return await rewrite_pair(w, rec, name, list(theirs), mine, theirs)


STRATEGY = StrategySpec(
    "instructed_rewrite",
    "the shared base answer rewritten for a stand-in who states another level of the user's "
    "own preference",
    write,
    design="rewrite",
)
