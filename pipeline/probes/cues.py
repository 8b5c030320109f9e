"""Surface cues: for each cue (list markers, headings, second person, hedges, exclamations,
readability) the answer with more of it wins; a value below 0.5 means the one with less does."""

from __future__ import annotations

from pipeline.cues import CUES, cues
from pipeline.probes.base import Probe, ProbeSpec, more_wins, rule


def cue_probes(rows: list[dict], seed: int = 0) -> list[Probe]:
    pairs = [(cues(r["chosen"]), cues(r["rejected"])) for r in rows]
    out = []
    for cue in CUES:
        more = [more_wins(c[cue], r[cue]) for c, r in pairs]
        if cue == "readability":
            about = "the easier-to-read answer wins (below 0.5: the harder one)"
        else:
            about = f"the answer with more {cue} wins (below 0.5: the one with fewer)"
        out.append(rule(f"cue: {cue}", about, more, seed))
    return out


PROBE = ProbeSpec("cues", "leakage", 20, cue_probes, "the answer with more or less of a cue wins")
