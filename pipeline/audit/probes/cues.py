"""Surface cues: for each cue (list markers, headings, second person, hedges, exclamations,
readability) the answer with more (or less) of it wins."""

from __future__ import annotations

import numpy as np

from pipeline.audit.probes.base import CUES, Probe, ProbeSpec, cues, more_wins, rule


def cue_probes(rows: list[dict], seed: int = 0) -> list[Probe]:
    pairs = [(cues(r["chosen"]), cues(r["rejected"])) for r in rows]
    out = []
    for cue in CUES:
        more = [more_wins(c[cue], r[cue]) for c, r in pairs]
        less = [1.0 - s for s in more]
        higher = np.mean(more) >= np.mean(less)
        better = more if higher else less
        if cue == "readability":
            about = f"the {'easier' if higher else 'harder'}-to-read answer wins"
        else:
            about = f"the answer with {'more' if higher else 'fewer'} {cue} wins"
        out.append(rule(f"cue: {cue}", about, better, seed))
    return out


PROBE = ProbeSpec("cues", "leakage", 20, cue_probes, "the answer with more or less of a cue wins")
