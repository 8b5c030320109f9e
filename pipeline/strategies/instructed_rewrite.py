"""instructed_rewrite, the rewrite design's instructed strategy: the shared base answer
rewritten for the user (chosen) and against the user's own stated preference (rejected): on
each of the recipe's dimensions the user states, another level that can show against theirs,
told with the words of a user of the run who states that level (as persona_rewrite's rejected
side is told its partner's). No partner is needed, so every user who states one of the
dimensions gets pairs, and the pair records the preference it breaks (`differences`).

The stand-in words are other users' own, never a fixed list: a place named on the rejected
side is some user's home, named on the chosen side of that user's pairs, so no place (or
phrase) marks an answer as rejected across the release. Kept, like persona_rewrite's, only if
a difference shows in the text (pipeline/realised.py).
"""

from __future__ import annotations

from pipeline.realised import visible
from pipeline.records import stable_id
from pipeline.strategies.base import StrategySpec
from pipeline.strategies.persona_rewrite import rewrite_pair, stated


def _pick(options: list, seed: int, *key: str):
    return options[int(stable_id(seed, *key), 16) % len(options)]


def broken(g, directions: dict, said: dict, mine: dict, who: str, seed: int, task: str) -> dict:
    """dimension -> (level, statement) for the rejected side: on each of the recipe's
    dimensions the user states (at most `dimensions_per_pair`), a level with an instruction
    that differs visibly from theirs (pipeline/realised.visible) and that another user of the
    run states, and one such user's statement, both picked by a seeded hash of the task."""
    out = {}
    for d in g.dimensions:
        if len(out) == g.dimensions_per_pair:
            break
        if d not in mine or mine[d][0] not in directions.get(d, {}):
            continue
        others = {
            level: [s for persona, s in said.get((d, level), ()) if persona != who]
            for level in directions[d]
            if level != mine[d][0] and visible(d, (mine[d][0], level))
        }
        levels = [level for level, statements in others.items() if statements]
        if levels:
            level = _pick(levels, seed, task, d)
            out[d] = (level, _pick(others[level], seed, task, d, level))
    return out


async def write(w, rec, name: str):
    task = rec.task
    g = w.ctx.cfg.generation
    directions = w.prompts["rejected"].extra["directions"]
    mine = stated(task)
    who = task.persona.persona_id
    theirs = broken(g, directions, w.said(), mine, who, w.ctx.cfg.seed, task.task_id)
    if not theirs:
        return w.dropped(
            rec,
            "no_preference_stated",
            f"{who} states none of {g.dimensions} (or nobody in the run states another level)",
        )
    return await rewrite_pair(w, rec, name, list(theirs), mine, theirs)


STRATEGY = StrategySpec(
    "instructed_rewrite",
    "the shared base answer rewritten against the user's own stated preference, told another "
    "level in the words of a user of the run who states it",
    write,
    design="rewrite",
)
