"""Agreement, annotator checks and verdicts from un-blinded labels.

- Votes: one per annotator per pair, from the first showing (the `pair` item; the `repeat`
  item only if the first is missing). Gold items never vote.
- Krippendorff's alpha (the `krippendorff` package) over pairs, ordinal on the five-point
  scale seen from chosen's side, and nominal on the direction (chosen / tie / rejected).
- Fleiss' kappa (statsmodels) on the direction, over the pairs rated by the most common number
  of raters (Fleiss' kappa assumes every unit has the same number of ratings).
- Gold accuracy: a gold label is right when its direction is the expected one.
- Self-consistency: a repeat is consistent when its direction equals the annotator's own label
  of the original item (A/B were swapped between the two showings).
- Annotators whose gold accuracy is below `exclude_below` are left out of votes and agreement.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from statistics import mean

import numpy as np

from pipeline.config import AnnotationConfig
from pipeline.records import AnnotationKey, AnnotationLabel, AnnotationRecord

ORDINAL = {
    ("rejected", "much"): 1,
    ("rejected", "slightly"): 2,
    ("tie", "none"): 3,
    ("chosen", "slightly"): 4,
    ("chosen", "much"): 5,
}
DIRECTIONS = ("chosen", "tie", "rejected")


def _r(x: float | None) -> float | None:
    return None if x is None or np.isnan(x) else round(float(x), 4)


def gold_accuracy(key: AnnotationKey, labels: list[AnnotationLabel]) -> dict[str, dict]:
    expected = {i.item_id: i.expected for i in key.items if i.expected}
    out: dict[str, dict] = {}
    for lab in labels:
        if lab.item_id in expected:
            s = out.setdefault(lab.annotator_id, {"n": 0, "correct": 0})
            s["n"] += 1
            s["correct"] += lab.side == expected[lab.item_id]
    for s in out.values():
        s["accuracy"] = _r(s["correct"] / s["n"])
    return dict(sorted(out.items()))


def self_consistency(key: AnnotationKey, labels: list[AnnotationLabel]) -> dict[str, dict]:
    repeat_of = {i.item_id: i.repeat_of for i in key.items if i.repeat_of}
    side = {(lab.item_id, lab.annotator_id): lab.side for lab in labels}
    out: dict[str, dict] = {}
    for lab in labels:
        first = side.get((repeat_of.get(lab.item_id), lab.annotator_id))
        if first is not None:
            s = out.setdefault(lab.annotator_id, {"n": 0, "consistent": 0})
            s["n"] += 1
            s["consistent"] += lab.side == first
    for s in out.values():
        s["rate"] = _r(s["consistent"] / s["n"])
    return dict(sorted(out.items()))


def excluded(key: AnnotationKey, labels: list[AnnotationLabel], bar: float | None) -> list[str]:
    if bar is None:
        return []
    return [a for a, s in gold_accuracy(key, labels).items() if s["accuracy"] < bar]


def votes(
    labels: list[AnnotationLabel], leave_out: list[str]
) -> dict[str, dict[str, AnnotationLabel]]:
    """pair id -> annotator -> the label that counts as that annotator's vote."""
    out: dict[str, dict[str, AnnotationLabel]] = defaultdict(dict)
    for kind in ("pair", "repeat"):
        for lab in labels:
            if lab.kind == kind and lab.annotator_id not in leave_out:
                out[lab.pair_id].setdefault(lab.annotator_id, lab)
    return out


def agreement(by_pair: dict[str, dict[str, AnnotationLabel]]) -> dict:
    annotators = sorted({a for v in by_pair.values() for a in v})
    units = sorted(p for p, v in by_pair.items() if len(v) >= 2)
    ordinal = np.full((len(annotators), len(units)), np.nan)
    nominal = np.full((len(annotators), len(units)), np.nan)
    for u, pair_id in enumerate(units):
        for a, annotator in enumerate(annotators):
            lab = by_pair[pair_id].get(annotator)
            if lab is not None:
                ordinal[a, u] = ORDINAL[(lab.side, lab.strength)]
                nominal[a, u] = DIRECTIONS.index(lab.side)
    counts = Counter(len(by_pair[p]) for p in units)
    raters = max(counts, key=lambda m: (counts[m], m)) if counts else 0
    table = np.array(
        [
            [sum(lab.side == d for lab in by_pair[p].values()) for d in DIRECTIONS]
            for p in units
            if len(by_pair[p]) == raters
        ]
    )
    return {
        "units": len(units),
        "annotators": len(annotators),
        "krippendorff_alpha_ordinal": _alpha(ordinal, "ordinal"),
        "krippendorff_alpha_nominal": _alpha(nominal, "nominal"),
        "fleiss_kappa": _fleiss(table),
        "fleiss_units": len(table),
        "fleiss_raters": raters,
    }


def _alpha(data: np.ndarray, level: str) -> float | None:
    if data.shape[1] < 1:
        return None
    try:
        import krippendorff  # imported here: every `prb` start would pay for it otherwise

        return _r(krippendorff.alpha(reliability_data=data, level_of_measurement=level))
    except ValueError:  # e.g. one value in the whole domain: alpha is undefined
        return None


def _fleiss(table: np.ndarray) -> float | None:
    if len(table) < 1:
        return None
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        from statsmodels.stats.inter_rater import fleiss_kappa

        return _r(fleiss_kappa(table, method="fleiss"))


def verdict(cfg: AnnotationConfig, pair_id: str, cast: dict[str, AnnotationLabel]):
    n = len(cast)
    sides = Counter(lab.side for lab in cast.values())
    record = {
        "pair_id": pair_id,
        "n_labels": n,
        "chosen_votes": sides["chosen"],
        "rejected_votes": sides["rejected"],
        "tie_votes": sides["tie"],
    }
    if n == 0:
        return AnnotationRecord(verdict="unlabelled", **record)
    if n < cfg.min_labels:
        return AnnotationRecord(verdict="insufficient", **record)
    quality_ok = all(
        mean(mean(getattr(lab, f).values()) for lab in cast.values()) >= cfg.min_quality
        for f in ("scores_chosen", "scores_rejected")
    )
    confirmed = sides["chosen"] * 2 > n and quality_ok
    return AnnotationRecord(verdict="confirmed" if confirmed else "refuted", **record)


def verdicts(
    cfg: AnnotationConfig,
    key: AnnotationKey,
    labels: list[AnnotationLabel],
    exclude_below: float | None = None,
) -> dict[str, AnnotationRecord]:
    bar = cfg.exclude_below if exclude_below is None else exclude_below
    by_pair = votes(labels, excluded(key, labels, bar))
    pair_ids = sorted({i.pair_id for i in key.items if i.kind == "pair"})
    return {p: verdict(cfg, p, by_pair.get(p, {})) for p in pair_ids}


def progress(key: AnnotationKey, labels: list[AnnotationLabel]) -> dict[str, dict]:
    done = Counter((lab.batch_id, lab.annotator_id) for lab in labels)
    out = {}
    for batch_id, assigned in key.assignments.items():
        n = sum(i.batch_id == batch_id for i in key.items)
        who = sorted({a for b, a in done if b == batch_id} | set(assigned))
        labelled = {a: done[(batch_id, a)] for a in who}
        out[batch_id] = {
            "items": n,
            "assigned": assigned,
            "labelled": labelled,
            "complete_annotators": sum(v >= n for v in labelled.values()),
        }
    return out


def summary(
    cfg: AnnotationConfig,
    key: AnnotationKey,
    labels: list[AnnotationLabel],
    exclude_below: float | None = None,
) -> dict:
    bar = cfg.exclude_below if exclude_below is None else exclude_below
    leave_out = excluded(key, labels, bar)
    kinds = Counter(i.kind for i in key.items)
    found = verdicts(cfg, key, labels, bar)
    return {
        "seed": key.seed,
        "batches": len(key.assignments),
        "items": {k: kinds[k] for k in ("pair", "repeat", "gold_identical", "gold_offtopic")},
        "labels": len(labels),
        "annotators": sorted({lab.annotator_id for lab in labels}),
        "exclude_below": bar,
        "excluded_annotators": leave_out,
        "agreement": agreement(votes(labels, leave_out)),
        "gold_accuracy": gold_accuracy(key, labels),
        "self_consistency": self_consistency(key, labels),
        "progress": progress(key, labels),
        "verdicts": dict(sorted(Counter(v.verdict for v in found.values()).items())),
    }
