"""Rejected strategies: how a pair's `rejected` answer comes to miss the user.

A strategy is one module of this package declaring `STRATEGY` (a `StrategySpec`), or a
plugin's entry point in the group `prb.strategies`:
- `persona_swap.py`: the chosen prompt's answer for a contrasting user (same question and key
  points); `persona_rewrite.py`: the rewrite design's (one base answer rewritten for each user);
- `instructed.py`: the strategies of the rejected prompt's `strategies:` table (one instruction
  each: `wrong_tone`, `lexical_decoy`, …). A plugin entry that is a string is one more of
  these: its instruction, added to the table (and to the prompt's hash).
The pairs stage (pipeline/stages/pairs.py) picks a strategy per task and hands it the writer;
it holds no strategy of its own.
"""

from __future__ import annotations

from pipeline.errors import PrbError
from pipeline.registry import Registry
from pipeline.strategies.base import StrategySpec

# every module of this package but base.py declares `STRATEGY`, named after the module
# (instructed.py's writes every strategy of the rejected prompt's table, so configs never name
# it); a plugin adds a StrategySpec or an instruction (a string)
STRATEGIES: Registry[StrategySpec | str] = Registry(
    "strategies", (StrategySpec, str), package=__name__, attr="STRATEGY"
)
INSTRUCTED = "instructed"  # the module whose one STRATEGY writes every table strategy


def instructions() -> dict[str, str]:
    """The instructions plugins add (name -> instruction), for the rejected prompt's table."""
    return {n: s for n, s in STRATEGIES.items() if isinstance(s, str)}


def spec(name: str, table: dict[str, str]) -> StrategySpec:
    """The strategy `name`: its own module, else one of the rejected prompt's `table`."""
    if name != INSTRUCTED and name in STRATEGIES.names():
        found = STRATEGIES.get(name)
        if isinstance(found, StrategySpec):
            return found
    if name in table:
        return STRATEGIES.get(INSTRUCTED)
    raise PrbError(f"no rejected strategy {name!r}: {', '.join(known(table))} are")


def about(name: str) -> str:
    """What the card says of strategy `name` (a released row's `rejected_strategy`)."""
    if name != INSTRUCTED and name in STRATEGIES.names():
        found = STRATEGIES.get(name)
        if isinstance(found, StrategySpec):
            return found.about
    return STRATEGIES.get(INSTRUCTED).about


def known(table: dict[str, str]) -> list[str]:
    """Every strategy a config may name: the modules' and the table's."""
    own = [n for n in STRATEGIES.names() if n != INSTRUCTED]
    return sorted(set(own) | set(table))
