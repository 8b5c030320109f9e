"""Prompt echo, model-free: an answer that repeats the prompt's own markup (`<key_points>`,
`</avoid_aspects>`, ...) instead of answering. Found on a real small model (issue 16), which
copied the data blocks of the generation prompt into both answers; neither answer of such a pair
is one a user would get, and the markup itself can separate chosen from rejected."""

from __future__ import annotations

import re

from pipeline.checks.base import Check, Figure
from pipeline.records import Record

# the tags of the generation prompts' data blocks (prompts/chosen.yaml, rejected.yaml)
MARKUP = re.compile(r"</?(question|key_points|aspects|avoid_aspects|strategy|profile)>", re.I)


class Settings(Record):
    drop_prompt_echo: bool = True


class Result(Record):
    chosen_echo: bool
    rejected_echo: bool


CHECK = Check(
    name="prompt_echo",
    order=35,
    settings=Settings,
    result=Result,
    measure=lambda pair, _, __: Result(
        chosen_echo=bool(MARKUP.search(pair.chosen)),
        rejected_echo=bool(MARKUP.search(pair.rejected)),
    ),
    decide=lambda r, s: (
        ["prompt_echo"] if s.drop_prompt_echo and (r.chosen_echo or r.rejected_echo) else []
    ),
    about="whether each answer repeats the prompt's markup (<key_points>, <aspects>, ...)",
    docs={"drop_prompt_echo": "drop a pair where an answer repeats the prompt's markup"},
    features={"chosen_echo": "bool", "rejected_echo": "bool"},
    released=lambda r: {"chosen_echo": r.chosen_echo, "rejected_echo": r.rejected_echo},
    figures=(
        Figure("prompt_echo", "pairs where an answer repeats the prompt's markup", lambda v: None
               if v.get("chosen_echo") is None else float(v["chosen_echo"] or v["rejected_echo"]),
               fmt="{:.1%}", plot=False),
    ),
    severity=lambda r: 3.0 * (r.chosen_echo + r.rejected_echo),
)
