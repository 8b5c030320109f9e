"""Model-free probes: can `chosen` be told from `rejected` without the user?

A pair should be separable only by how well each answer fits its user. Each probe below is a
rule that never reads the user's profile (except `profile overlap`, which reads it only for
shared words) and predicts which answer is `chosen`; its accuracy over the pairs, with a 95%
interval, says how much of the benchmark such a rule solves:

- length: the longer answer wins, or the shorter, whichever is right more often (also: the
  share of pairs whose `chosen` is longer, and the median rejected/chosen word ratio, which
  must sit in 0.85-1.15);
- surface cues: for each of list markers, headings, second-person address, hedges,
  exclamations and readability (Flesch reading ease), the answer with more of it wins, or the
  one with less, whichever is right more often;
- an answer-only classifier: logistic regression over the surface cues and word and character
  n-grams of the two answers, cross-validated with folds grouped by user (one user's pairs
  never span training and test);
- profile overlap: the answer sharing more of its words with the profile wins.

A tie counts half. Verdict: a probe **leaks** when the lower end of its 95% interval is above
`THRESHOLD` (0.55): it beats a coin reliably, and by a margin. 0.5 is what a release where only
personal fit separates the answers gives. No verdict is given from fewer than
`MIN_VERDICT_PAIRS` (100) pairs: the figures are shown, the verdict is "too few pairs".
"""

from __future__ import annotations

import functools
import statistics

from pipeline.audit.probes.base import CUES, Probe, ProbeSpec, cues, readability  # noqa: F401
from pipeline.audit.probes.classifier import classifier_probe  # noqa: F401
from pipeline.registry import declared
from pipeline.stats import LENGTH_BAND, MIN_VERDICT_PAIRS, THRESHOLD, words  # noqa: F401


@functools.cache
def registered() -> tuple[ProbeSpec, ...]:
    """Every module of this package that declares `PROBE`, and those other packages declare
    as entry points of the group `prb.probes`: a new probe is one file. Found on first use, so
    a plugin module may import this package."""
    found = declared(__name__, __path__, "PROBE", "probes")
    return tuple(sorted(found, key=lambda p: (p.order, p.name)))


def run_all(rows: list[dict], seed: int = 0) -> list[Probe]:
    """Every registered probe on `rows`, each figure tagged with its probe's family."""
    out = []
    for spec in registered():
        for p in spec.run(rows, seed):
            p.family = spec.family
            out.append(p)
    return out


def summary(probes: list[Probe]) -> dict:
    """The verdict over the probes: none from fewer than MIN_VERDICT_PAIRS pairs, where an
    interval is too wide to fail a probe (21 pairs "pass" at 0.67 accuracy)."""
    pairs = max((p.n for p in probes), default=0)
    enough = pairs >= MIN_VERDICT_PAIRS
    shown = [p.as_dict() | ({} if enough else {"leak": None}) for p in probes]
    leaks = [p.name for p in probes if p.leak] if enough else []
    verdict = ("leaky" if leaks else "pass") if enough else "too few pairs"
    return {"threshold": THRESHOLD, "length_band": list(LENGTH_BAND), "leaks": leaks,
            "verdict": verdict, "pairs": pairs, "min_pairs": MIN_VERDICT_PAIRS,
            "probes": shown}  # fmt: skip


def plot(probes: list[Probe], path) -> None:
    """Each accuracy probe with its 95% interval against chance and the threshold."""
    from pipeline.reports import pyplot

    plt = pyplot()

    shown = [p for p in probes if p.kind == "accuracy" and p.value is not None]
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(shown) + 1.2))
    ys = range(len(shown))
    colors = ["#c44e52" if p.leak else "#55a868" for p in shown]
    ax.barh(list(ys), [p.value for p in shown], color=colors, alpha=0.8)
    ax.errorbar([p.value for p in shown], list(ys), fmt="none", ecolor="black", capsize=3,
                xerr=[[max(0.0, p.value - p.low) for p in shown],
                      [max(0.0, p.high - p.value) for p in shown]])  # fmt: skip
    ax.axvline(0.5, color="grey", ls=":", lw=1, label="chance (0.5)")
    ax.axvline(THRESHOLD, color="#c44e52", ls="--", lw=1, label=f"leak if CI above {THRESHOLD}")
    ax.set_yticks(list(ys), [p.name for p in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy at picking chosen without the user (95% interval); red: a leak")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def plot_lengths(rows: list[dict], path) -> None:
    from pipeline.reports import pyplot

    plt = pyplot()

    ratios = [len(words(r["rejected"])) / max(1, len(words(r["chosen"]))) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.hist(ratios, bins=30, color="#8172b2")
    ax.axvspan(*LENGTH_BAND, color="#55a868", alpha=0.15, label="0.85-1.15 (median target)")
    ax.axvline(statistics.median(ratios), color="black", lw=1, label="median")
    ax.set_xlabel("rejected words / chosen words")
    ax.set_ylabel("pairs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
