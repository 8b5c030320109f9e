"""Profile overlap: the answer sharing more of its words with the profile wins (reads the
profile only for shared words)."""

from __future__ import annotations

from pipeline.probes.base import Probe, ProbeSpec, more_wins, rule
from pipeline.release.load import profile_text
from pipeline.text import content_words  # the overlap baseline's words, exactly


def overlap_probe(rows: list[dict], seed: int = 0) -> Probe:
    def share(text: str, profile: set[str]) -> float:
        w = content_words(text)
        return len(w & profile) / len(w) if w else 0.0

    scores = []
    for r in rows:
        profile = content_words(profile_text(r))
        scores.append(more_wins(share(r["chosen"], profile), share(r["rejected"], profile)))
    return rule(
        "profile overlap",
        "the answer sharing more of its words with the profile wins",
        scores,
        seed,
        floor=True,
    )


PROBE = ProbeSpec(
    "overlap",
    "floor",
    40,
    lambda rows, seed=0: [overlap_probe(rows, seed)],
    "the answer sharing more words with the profile wins",
)
