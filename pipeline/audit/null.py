"""The null test on any release (`prb audit --null N`): is each answer-only probe unbiased here,
and is its interval honest?

Each of N copies of the release is relabelled by a fair coin per pair (chosen and rejected
swapped or not), which leaves no signal; every leakage probe of accuracy kind is run on each.
An unbiased probe averages 0.5 over the copies, and its 95% interval should exclude 0.5 in
about 5% of them: many more (a binomial tail below 1%) means the interval is too narrow on this
release (e.g. near-duplicate pairs in different folds make the classifier's credits move
together), and the probe's flag is marked `narrow`. The observed value is also given a
permutation p-value against the copies: the share of copies at least as far from 0.5, with
the observed counted in (1 + k) / (N + 1), which needs no interval at all.
"""

from __future__ import annotations

import random
import statistics

from scipy.stats import binom

from pipeline import probes, progress
from pipeline.probes.base import Probe

NOMINAL = 0.05  # the intervals' own miss rate
NARROW = 0.01  # a binomial tail of excluded copies below this: the interval is too narrow


def relabelled(rows: list[dict], seed: int) -> list[dict]:
    """A fair coin per pair swaps chosen and rejected: no signal is left."""
    rng = random.Random(seed)
    return [
        dict(r, chosen=r["rejected"], rejected=r["chosen"]) if rng.random() < 0.5 else r
        for r in rows
    ]


def tested(p: Probe) -> bool:
    return p.family == "leakage" and p.kind == "accuracy" and p.value is not None


def null_test(rows: list[dict], observed: list[Probe], runs: int, seed: int = 0) -> dict:
    """Every observed leakage probe of accuracy kind against `runs` relabelled copies."""
    values: dict[str, list[float]] = {}
    excluded: dict[str, int] = {}
    shown = progress.stage("null test", total=runs)  # with an ETA, like a build's stages
    try:
        for k in range(runs):
            for p in filter(tested, probes.run_all(relabelled(rows, 1000 * (seed + 1) + k), k)):
                values.setdefault(p.name, []).append(p.value)
                excluded[p.name] = excluded.get(p.name, 0) + (not p.low <= 0.5 <= p.high)
            shown.advance()
    finally:
        shown.finish()
    out = []
    for p in filter(tested, observed):
        found = values.get(p.name, [])
        if not found:
            continue
        far = sum(abs(v - 0.5) >= abs(p.value - 0.5) for v in found)
        miss = excluded[p.name]
        out.append(
            {
                "name": p.name,
                "runs": len(found),
                "mean": statistics.fmean(found),
                "sd": statistics.stdev(found) if len(found) > 1 else None,
                "excluded": miss,
                "observed": p.value,
                "p": (1 + far) / (1 + len(found)),
                "narrow": bool(binom.sf(miss - 1, len(found), NOMINAL) < NARROW),
            }
        )
    return {"runs": runs, "seed": seed, "nominal": NOMINAL, "probes": out}


def warnings(null: dict | None) -> list[str]:
    return [
        f"null test: {q['name']}'s 95% interval excluded 0.5 on {q['excluded']} of "
        f"{q['runs']} relabelled copies (about {NOMINAL * q['runs']:.0f} expected): too "
        "narrow on this release; read its flag with its permutation p-value"
        for q in (null or {}).get("probes", [])
        if q["narrow"]
    ]
