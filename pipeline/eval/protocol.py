"""How `prb eval` scores, by name (`--protocol`), so that every table can say which rules made it.

`prb` (the default) is the personalized protocol: the model sees the user context, which is cut by
whole posts to fit (never the answer), and a pairwise judge answers both A/B orders.

`published` reproduces the public Personalized RewardBench scorer's choices: the model sees the
question only; a reward model reads the chat `[user: question, assistant: answer]` through its
chat template, padded per batch of 8 answers (one category at a time, as its scripts run one
subset at a time), cut from the right at 8,192 tokens (so a long answer loses its end), scored
by its one logit or the softmax probability of its last label; ties lose. A pairwise judge sees
one A/B order per pair, drawn by `random.Random(42)` once per pair of each category in release
order; its prompts are read from the user's clone of the public repository (prb ships none of
its text), filled in by plain replacement; its verdict is the letter after the last `</think>`'s
"result:" (quotes and asterisks removed), and a verdict with none counts as A.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PrbError
from pipeline.llm.prompts import Prompt


@dataclass(frozen=True)
class Protocol:
    name: str
    context: str | None  # the user context every model sees; None: `--context` decides
    rules: str  # one line for every table
    ties: str  # the tie rule, for every table
    tie_rule: str = "lose"  # the same, one word for the CSV column


PROTOCOLS = {
    "prb": Protocol(
        "prb",
        None,
        "prb's personalized protocol: the user context goes in, cut by whole posts to fit the "
        "model (never the answer); a pairwise judge answers both A/B orders",
        "ties lose (won only if chosen scores strictly above rejected; a pairwise judge's "
        "split verdict is a tie)",
    ),
    "published": Protocol(
        "published",
        "none",
        "the public scorer's rules: the question only; inputs cut from the right at 8,192 "
        "tokens; a pairwise judge sees one A/B order per pair (seed 42 per category) and an "
        "unparseable verdict counts as A",
        "ties lose",
    ),
}
PUBLIC_MAX_LENGTH = 8192
PUBLIC_SEED = 42
PUBLIC_PROMPTS = ("pairwise_system.txt", "pairwise_user.txt")
PUBLIC_FIELDS = ("{question}", "{Response_A}", "{Response_B}")


class ProtocolError(PrbError, ValueError):
    """A protocol option that cannot be used; the message names it."""


def protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise ProtocolError(f"--protocol {name}: use one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def chosen_first(rows: list[dict], seed: int = PUBLIC_SEED) -> list[bool]:
    """Per row, whether the public pairwise scorer shows chosen as A: one draw per pair from a
    generator seeded per category (its scripts score one subset per run)."""
    rngs: dict[str, random.Random] = {}
    return [rngs.setdefault(r["category"], random.Random(seed)).random() < 0.5 for r in rows]


def public_verdict(text: str) -> str | None:
    """'A' or 'B' by the public pairwise scorer's reading of a judge's answer; None when it
    finds neither (the scorer then counts A)."""
    text = text.strip().split("</think>")[-1].strip()
    text = text.replace('"', "").replace("*", "").strip().lower()
    if "result:" not in text:
        return None
    found = text.split("result:")[1].strip()
    return "A" if found.startswith("a") else "B" if found.startswith("b") else None


def load_public_prompts(folder: Path | str | None) -> Prompt:
    """The public pairwise judge's prompt from the user's clone of the public repository (its
    root or its prompts/ folder); one line naming the file when it cannot be used."""
    if folder is None:
        raise ProtocolError(
            "--protocol published with a pairwise judge needs --public-prompts DIR: your clone "
            "of the public Personalized RewardBench repository (its prompts/ folder holds "
            f"{' and '.join(PUBLIC_PROMPTS)})"
        )
    folder = Path(folder)
    if (folder / "prompts" / PUBLIC_PROMPTS[0]).is_file():
        folder = folder / "prompts"
    texts = []
    for name in PUBLIC_PROMPTS:
        path = folder / name
        try:
            texts.append(path.read_text(encoding="utf-8").strip())  # its scripts strip them
        except (OSError, UnicodeDecodeError) as e:
            why = "no such file" if isinstance(e, FileNotFoundError) else e
            raise ProtocolError(
                f"{path}: cannot read the public judge prompt ({why}); point "
                "--public-prompts at your clone of the public "
                "repository"
            ) from None
    system, user = texts
    missing = [f for f in PUBLIC_FIELDS if f not in user]
    if missing:
        raise ProtocolError(
            f"{folder / PUBLIC_PROMPTS[1]}: no {', '.join(missing)} in the "
            "template; is this the public repository's prompt?"
        )
    digest = hashlib.sha256(f"{system}\0{user}".encode()).hexdigest()
    return Prompt(
        task="published_pairwise",
        version="public",
        path=folder / PUBLIC_PROMPTS[1],
        system=system,
        user=user,
        output=None,
        engine="replace",
        sha256=digest,
        params={"temperature": 0.0, "max_tokens": 512},
    )
