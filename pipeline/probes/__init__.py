"""The probes: what separates `chosen` from `rejected`, in three families reported apart.

- **leakage** (answer only, never the user; only these can call a release `leaky`): length
  (the longer answer wins; the median rejected/chosen word ratio, which must sit in
  0.85-1.15), surface cues (list markers, headings, second person, hedges, exclamations,
  readability: the answer with more of it wins), and the answer-only classifier (antisymmetric
  logistic regression, cross-fitted with folds that keep a user and an answer text
  together). Each rule's direction is fixed in advance, so a value below 0.5 is as much a leak
  as one above: a probe leaks when its 95% interval lies beyond `THRESHOLD` (0.55) on either
  side of 0.5.
- **floor** (shallow user-aware baselines a reward model must beat): profile overlap and a
  BM25 ranker against the profile. `easy` when the interval's lower end is above `EASY`
  (0.60); never a leak, since personalization may well share the user's words.
- **judge** (with `prb audit --judge`; `_judge.py` holds what they share): persona-aware
  (`judge_aware.py`), persona-blind in both orders (`judge_blind.py`), counterfactual
  (`judge_counterfactual.py`), the 2x2 swap (`judge_swap.py`); pairwise or position-free.

A tie counts half. A probe is one module of this package declaring `PROBE` (or a plugin's
entry point). No verdict from fewer than `MIN_VERDICT_PAIRS` (100) pairs: the figures are
shown, the verdict is "too few pairs". Every leakage probe is checked by the null test
(tests/test_validity.py): on a release relabelled by a fair coin per pair it reads 0.5.
"""

from __future__ import annotations

import math
import statistics

from pipeline.probes.base import Probe, ProbeSpec  # noqa: F401
from pipeline.probes.classifier import classifier_probe  # noqa: F401
from pipeline.registry import Registry
from pipeline.stats import EASY, LENGTH_BAND, MIN_VERDICT_PAIRS, THRESHOLD, words  # noqa: F401

# every module of this package but base.py declares its `PROBE` (named after the module), and
# other packages add theirs as entry points of `prb.probes`: a new probe is one file. Loaded on
# first use, so a plugin module may import this package.
PROBES: Registry[ProbeSpec] = Registry(
    "probes",
    ProbeSpec,
    package=__name__,
    attr="PROBE",
    order=lambda p: (p.order, p.name),
    named=True,
)


def registered() -> tuple[ProbeSpec, ...]:
    return PROBES.load_all()


def run_all(rows: list[dict], seed: int = 0) -> list[Probe]:
    """Every registered model-free probe on `rows`, each figure tagged with its family."""
    out = []
    for spec in registered():
        for p in spec.run(rows, seed) if spec.run else ():
            p.family = spec.family
            out.append(p)
    return out


async def run_judges(
    rows: list[dict], llm, model: str, position_free: bool = False, seed: int = 0
) -> list[Probe]:
    """Every registered judge probe on `rows`, asking `model` through `llm` (pairwise, or
    each answer alone with `position_free`)."""
    from pipeline.probes._judge import Judge

    judge = Judge(rows, llm, model, position_free)
    out = []
    for spec in registered():
        for p in await spec.asks(rows, judge, seed) if spec.asks else ():
            p.family = spec.family
            out.append(p)
    return out


# each family: the verdict its flagged probes give, what it asks, and what a flag means
FAMILIES = {
    "leakage": (
        "leaky",
        "Leakage: can chosen be told apart without the user?",
        "answer only, never the user; a probe leaks when its 95% interval lies beyond "
        f"{THRESHOLD} on either side of 0.5 (the median length ratio: outside "
        f"{LENGTH_BAND[0]}–{LENGTH_BAND[1]})",
    ),
    "floor": (
        "easy",
        "Floors: how far does shallow word matching with the user get?",
        "user-aware baselines a reward model must beat; easy when the lower end of the "
        f"interval is above {EASY} (never a leak: personalization may share the user's "
        "words)",
    ),
    "judge": (
        "judge flags",
        "Judges: what an LLM judge sees with and without the user",
        "persona-aware (should be high), persona-blind in both orders (0.5: no general "
        "quality gap), counterfactual (should rarely survive a swap of users), the 2x2 swap "
        "(each answer preferred by the user it was written for: should be high)",
    ),
}


def proven(p: Probe) -> bool:
    """A flag its interval proves whatever the number of pairs: an accuracy's interval lies
    beyond the threshold (that is how `rule` flags), a ratio's wholly outside the band (below
    MIN_VERDICT_PAIRS its point estimate alone flags nothing)."""
    if not p.leak or p.low is None or math.isnan(p.low):
        return False
    if p.kind == "ratio":
        return p.low > LENGTH_BAND[1] or p.high < LENGTH_BAND[0]
    return True


def summary(probes: list[Probe]) -> dict:
    """The verdict over the probes, family by family: `leaky` only from the leakage family,
    `easy` from the floors. Fewer than MIN_VERDICT_PAIRS pairs can stop a pass, where an
    interval is too wide to fail a probe (21 pairs "pass" at 0.67 accuracy), never a flag its
    interval already proves (90 pairs whose classifier reads 1.000 [0.959, 1.000] leak)."""
    pairs = max((p.n for p in probes), default=0)
    enough = pairs >= MIN_VERDICT_PAIRS
    flag = {p.name: bool(p.leak) if enough else proven(p) for p in probes}
    shown = [
        p.as_dict() | ({} if enough else {"leak": True if flag[p.name] else None}) for p in probes
    ]
    flagged = {f: [p.name for p in probes if flag[p.name] and p.family == f] for f in FAMILIES}
    leaks, easy = flagged["leakage"], flagged["floor"]
    verdict = "leaky" if leaks else "easy" if easy else "pass" if enough else "too few pairs"
    families = [
        {
            "family": f,
            "title": title,
            "rule": text,
            "flag": flag,
            "flagged": flagged[f],
            "probes": [p for p in shown if p["family"] == f],
        }
        for f, (flag, title, text) in FAMILIES.items()
        if any(p["family"] == f for p in shown)
    ]
    return {
        "threshold": THRESHOLD,
        "easy": EASY,
        "length_band": list(LENGTH_BAND),
        "leaks": leaks,
        "easy_by": easy,
        "judge_flags": flagged["judge"],
        "verdict": verdict,
        "pairs": pairs,
        "min_pairs": MIN_VERDICT_PAIRS,
        "probes": shown,
        "families": families,
    }


def plot(probes: list[Probe], path) -> None:
    """Each accuracy probe with its 95% interval against chance and the threshold."""
    from pipeline.reports import pyplot

    plt = pyplot()

    shown = [p for p in probes if p.kind == "accuracy" and p.value is not None]
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(shown) + 1.2))
    ys = range(len(shown))
    colors = ["#c44e52" if p.leak else "#55a868" for p in shown]
    ax.barh(list(ys), [p.value for p in shown], color=colors, alpha=0.8)
    ax.errorbar(
        [p.value for p in shown],
        list(ys),
        fmt="none",
        ecolor="black",
        capsize=3,
        xerr=[
            [max(0.0, p.value - p.low) for p in shown],
            [max(0.0, p.high - p.value) for p in shown],
        ],
    )
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
