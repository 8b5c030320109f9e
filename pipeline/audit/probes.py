"""Model-free leakage probes: can `chosen` be told from `rejected` without the user?

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

import random
import re
import statistics
from dataclasses import dataclass

import numpy as np

from pipeline.release.load import profile_text, user_key
from pipeline.stats import LENGTH_BAND, MIN_VERDICT_PAIRS, THRESHOLD, bootstrap, wilson, words
from pipeline.text import content_words  # the overlap baseline's words, exactly

_LIST = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.M)
_HEADING = re.compile(r"^\s*(?:#{1,6}\s+\S|[A-Z][^.!?\n]{0,60}:\s*$)", re.M)
_YOU = re.compile(r"\b(?:you|your|yours|yourself|you're|you'll)\b", re.I)
_HEDGE = re.compile(
    r"\b(?:might|may|perhaps|possibly|could|generally|usually|often|likely|probably|maybe|"
    r"somewhat|it depends|in most cases|tends? to)\b",
    re.I,
)
_SENTENCE = re.compile(r"[.!?]+(?:\s|$)")


def _syllables(word: str) -> int:
    groups = re.findall(r"[aeiouy]+", word.lower())
    n = len(groups) - (1 if word.lower().endswith("e") and len(groups) > 1 else 0)
    return max(1, n)


def readability(text: str) -> float:
    """Flesch reading ease (higher: easier)."""
    w = words(text)
    if not w:
        return 0.0
    sentences = max(1, len(_SENTENCE.findall(text)))
    return 206.835 - 1.015 * len(w) / sentences - 84.6 * sum(map(_syllables, w)) / len(w)


def cues(text: str) -> dict[str, float]:
    """Surface cues of one answer; rates are per word."""
    n = max(1, len(words(text)))
    return {
        "list markers": float(len(_LIST.findall(text))),
        "headings": float(len(_HEADING.findall(text))),
        "second person": len(_YOU.findall(text)) / n,
        "hedges": len(_HEDGE.findall(text)) / n,
        "exclamations": float(text.count("!")),
        "readability": readability(text),
    }


CUES = tuple(cues("x"))


@dataclass
class Probe:
    name: str
    value: float | None
    low: float | None
    high: float | None
    n: int
    about: str
    leak: bool | None = None  # None: not enough pairs to say
    kind: str = "accuracy"  # "accuracy" (0.5 = chance) or "ratio"

    def as_dict(self) -> dict:
        r = lambda x: None if x is None else round(x, 4)  # noqa: E731
        return {"name": self.name, "value": r(self.value), "low": r(self.low),
                "high": r(self.high), "n": self.n, "about": self.about, "leak": self.leak,
                "kind": self.kind}  # fmt: skip


def _rule(name: str, about: str, scores: list[float], seed: int) -> Probe:
    """A rule's accuracy from per-pair scores (1 right, 0 wrong, 0.5 tie)."""
    if not scores:
        return Probe(name, None, None, None, 0, about)
    lo, hi = bootstrap(scores, seed)
    return Probe(name, float(np.mean(scores)), lo, hi, len(scores), about, leak=lo > THRESHOLD)


def _more_wins(a: float, b: float) -> float:
    return 1.0 if a > b else 0.0 if a < b else 0.5


def length_probes(rows: list[dict], seed: int = 0) -> list[Probe]:
    lengths = [(len(words(r["chosen"])), len(words(r["rejected"]))) for r in rows]
    longer = [1.0 if c > r else 0.0 for c, r in lengths]
    ratios = [r / max(1, c) for c, r in lengths]
    med = statistics.median(ratios)
    lo, hi = bootstrap(ratios, seed, stat=np.median)
    band = LENGTH_BAND
    longer_wins = [_more_wins(c, r) for c, r in lengths]
    if np.mean(longer_wins) >= 0.5:
        rule = _rule("length: longer wins", "the longer answer is taken as chosen", longer_wins,
                     seed)  # fmt: skip
    else:  # a release whose chosen answers are the shorter ones leaks just as much
        rule = _rule("length: shorter wins", "the shorter answer is taken as chosen",
                     [1.0 - x for x in longer_wins], seed)  # fmt: skip
    return [
        rule,
        Probe(
            "length: chosen is longer",
            float(np.mean(longer)),
            *bootstrap(longer, seed),
            len(rows),
            "share of pairs whose chosen answer has more words (information)",
            kind="share",
        ),  # fmt: skip
        Probe(
            "length: median rejected/chosen ratio",
            med,
            lo,
            hi,
            len(rows),
            f"median of rejected words / chosen words; a leak outside {band[0]}-{band[1]}",
            leak=not band[0] <= med <= band[1],
            kind="ratio",
        ),  # fmt: skip
    ]


def cue_probes(rows: list[dict], seed: int = 0) -> list[Probe]:
    pairs = [(cues(r["chosen"]), cues(r["rejected"])) for r in rows]
    out = []
    for cue in CUES:
        more = [_more_wins(c[cue], r[cue]) for c, r in pairs]
        less = [1.0 - s for s in more]
        higher = np.mean(more) >= np.mean(less)
        better = more if higher else less
        if cue == "readability":
            rule = f"the {'easier' if higher else 'harder'}-to-read answer wins"
        else:
            rule = f"the answer with {'more' if higher else 'fewer'} {cue} wins"
        out.append(_rule(f"cue: {cue}", rule, better, seed))
    return out


def overlap_probe(rows: list[dict], seed: int = 0) -> Probe:
    def share(text: str, profile: set[str]) -> float:
        w = content_words(text)
        return len(w & profile) / len(w) if w else 0.0

    scores = []
    for r in rows:
        profile = content_words(profile_text(r))
        scores.append(_more_wins(share(r["chosen"], profile), share(r["rejected"], profile)))
    return _rule("profile overlap", "the answer sharing more of its words with the profile "
                 "wins", scores, seed)  # fmt: skip


def classifier_probe(rows: list[dict], seed: int = 0, folds: int = 5) -> Probe:
    """Answer-only logistic regression, folds grouped by user; Wilson interval on accuracy."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    about = ("logistic regression on surface cues and word/char n-grams of the two answers, "
             "never the user; folds grouped by user")  # fmt: skip
    groups = [user_key(r) for r in rows]
    k = min(folds, len(set(groups)))
    if len(rows) < 10 or k < 2:
        return Probe("answer-only classifier", None, None, None, len(rows), about)
    rng = random.Random(seed)
    first, second, y = [], [], []
    for r in rows:  # each pair shown once, in a random order: is the first answer chosen?
        flip = rng.random() < 0.5
        first.append(r["rejected"] if flip else r["chosen"])
        second.append(r["chosen"] if flip else r["rejected"])
        y.append(0 if flip else 1)
    y = np.asarray(y)
    cue_diff = np.asarray([[a - b for a, b in zip(cues(x).values(), cues(z).values(),
                                                   strict=True)]
                           for x, z in zip(first, second, strict=True)])  # fmt: skip
    cue_diff = cue_diff / (np.abs(cue_diff).max(axis=0) + 1e-9)
    right = 0
    for train, test in GroupKFold(n_splits=k).split(first, y, groups):
        vecs = [
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
            TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True),
        ]
        for v in vecs:  # fitted on the training answers only
            v.fit([first[i] for i in train] + [second[i] for i in train])

        def features(idx, vecs=vecs):
            diffs = [v.transform([first[i] for i in idx]) - v.transform([second[i] for i in idx])
                     for v in vecs]  # fmt: skip
            return hstack([*diffs, csr_matrix(cue_diff[idx])]).tocsr()

        train_y = y[train]
        if len(set(train_y)) < 2:  # one class only: predict it
            right += int((y[test] == train_y[0]).sum())
            continue
        model = LogisticRegression(max_iter=2000, C=1.0).fit(features(train), train_y)
        right += int((model.predict(features(test)) == y[test]).sum())
    n = len(rows)
    lo, hi = wilson(right, n)
    return Probe("answer-only classifier", right / n, float(lo), float(hi), n, about,
                 leak=float(lo) > THRESHOLD)  # fmt: skip


def run_all(rows: list[dict], seed: int = 0) -> list[Probe]:
    return [*length_probes(rows, seed), *cue_probes(rows, seed), classifier_probe(rows, seed),
            overlap_probe(rows, seed)]  # fmt: skip


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
