"""`prb compare RELEASE_A RELEASE_B`: two ways of building the same pairs, side by side.

Both releases are read through pipeline/release/load.py (prb's or anyone's, any layout). A pair
of A and a pair of B are the same pair when they share the user (the profile's text) and the
question; releases that store different profiles for the same users (one keeps the top-k
posts, say) are matched on the `persona_id` both give, and the report says so. Every figure is given
on the shared pairs (the fair comparison: same users, same questions) and on each release
whole: lengths, the audit's model-free leakage probes, every check's declared figures where
the release carries that check's columns (prb's `quality` and `pair_checks`), and keep rates
from the manifest (and `would_drop`, for a record-only recipe).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path

from pipeline import probes
from pipeline.release import figures as check_figures
from pipeline.release.load import load_rows, profile_text
from pipeline.reports import render
from pipeline.stats import word_count
from pipeline.store import atomic_write
from pipeline.text import normalise


def _question(row: dict) -> str:
    return normalise(row["question"])


def _profile(row: dict) -> str:
    return hashlib.sha256(profile_text(row).encode()).hexdigest()[:16]


def match(a: list[dict], b: list[dict]) -> tuple[list[tuple[dict, dict]], str]:
    """The pairs both releases hold, and what they were matched on: the user's profile text
    and the question; else (releases that keep different posts of the same users, e.g. one
    only the top-k) the `persona_id` both give and the question. Never the question alone:
    two users asking the same thing are two pairs."""
    keys = (
        ("user and question", lambda r: (_profile(r), _question(r))),
        ("persona_id and question", lambda r: (r.get("persona_id"), _question(r))),
    )
    for name, key in keys:
        in_b = {key(r): r for r in b if key(r)[0]}
        shared = [(r, in_b[key(r)]) for r in a if key(r)[0] and key(r) in in_b]
        if shared:
            return shared, name
    return [], "user and question"


def _mean(xs: list[float]) -> float | None:
    return round(statistics.fmean(xs), 4) if xs else None


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def figures(rows: list[dict]) -> dict:
    """One release's (or its shared pairs') figures: lengths, the probes, and every check's
    declared figures read from the columns the release carries."""
    wc = [word_count(r["chosen"]) for r in rows]
    wr = [word_count(r["rejected"]) for r in rows]
    would = [r["would_drop"] for r in rows if isinstance(r.get("would_drop"), list)]
    found = probes.run_all(rows) if len(rows) >= 2 else []
    return {
        "pairs": len(rows),
        "words_chosen_mean": _mean(wc),
        "words_rejected_mean": _mean(wr),
        "words_chosen_median": _median(wc),
        "words_rejected_median": _median(wr),
        "median_length_ratio": _median([b / max(1, a) for a, b in zip(wc, wr, strict=True)]),
        "chosen_longer": _mean([float(a > b) for a, b in zip(wc, wr, strict=True)]),
        "would_keep": _mean([float(not w) for w in would]) if would else None,
        "checks": {
            s["key"]: s
            for s in check_figures.summarize_all([check_figures.of_row(r) for r in rows])
        },
        "probes": probes.summary(found) if found else None,
    }


def keep_rates(spec: str) -> dict | None:
    """A prb release's manifest funnel: released / pairs generated, released / questions."""
    path = Path(spec)
    manifest = (path if path.is_dir() else path.parent) / "manifest.json"
    if spec.startswith("hf:") or not manifest.is_file():
        return None
    data = json.loads(manifest.read_text())
    funnel = {s["stage"]: s["count"] for s in data["funnel"]}
    released = funnel.get("released")
    if not released:
        return None
    rate = lambda stage: round(released / funnel[stage], 4) if funnel.get(stage) else None  # noqa: E731
    config = data["config"]
    return {
        "of_pairs": rate("pairs"),
        "of_questions": rate("questions"),
        "recipe": config.get("recipe"),
        "filters_mode": config["filters"].get("mode"),
    }


# (label, key, how to show it) for the terminal table and the reports, in order
ROWS = [
    ("pairs", "pairs", "{:d}"),
    ("words, chosen (mean)", "words_chosen_mean", "{:.1f}"),
    ("words, rejected (mean)", "words_rejected_mean", "{:.1f}"),
    ("median rejected/chosen words", "median_length_ratio", "{:.3f}"),
    ("share chosen longer", "chosen_longer", "{:.3f}"),
    ("would keep (record-only checks)", "would_keep", "{:.3f}"),
]


FLAG = {"leakage": " LEAK", "floor": " EASY", "judge": " FLAG"}


def show(value, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def table(report: dict) -> list[list[str]]:
    """Rows: metric, A shared, B shared, A all, B all."""
    a, b = report["a"], report["b"]
    out = []
    for label, key, fmt in ROWS:
        out.append(
            [label] + [show(x[part][key], fmt) for part in ("shared", "all") for x in (a, b)]
        )
    for _, f in check_figures.declared():  # every check's figures a release carries
        cells = [
            x[part]["checks"].get(f.key, {}).get("text", "–")
            for part in ("shared", "all")
            for x in (a, b)
        ]
        if any(c != "–" for c in cells):
            out.append([f"{f.label}", *cells])
    family = {p["name"]: p["family"] for p in (a["all"]["probes"] or {}).get("probes", [])}
    names = list(family)
    for name in names:
        cells = []
        for part in ("shared", "all"):
            for x in (a, b):
                found = {p["name"]: p for p in (x[part]["probes"] or {}).get("probes", [])}
                p = found.get(name)
                flag = FLAG[p["family"]] if p and p["leak"] else ""
                cells.append("–" if not p or p["value"] is None else f"{p['value']:.3f}{flag}")
        out.append([f"{family[name]} probe: {name}"] + cells)
    for part_label, part in (("verdict", "probes"),):
        out.append(
            [part_label]
            + [(x[p][part] or {}).get("verdict", "–") for p in ("shared", "all") for x in (a, b)]
        )
    for key, label in (
        ("of_pairs", "keep rate (released / pairs made)"),
        ("of_questions", "keep rate (released / questions)"),
    ):
        cells = [show((x["keep"] or {}).get(key), "{:.3f}") for x in (a, b)]
        out.append([label, "", "", *cells])
    return out


def plot(report: dict, rows_a: list[dict], rows_b: list[dict], out: Path) -> dict[str, str]:
    from pipeline.reports import pyplot

    plt = pyplot()

    out.mkdir(parents=True, exist_ok=True)
    names = (report["a"]["name"], report["b"]["name"])
    fig, ax = plt.subplots(figsize=(7, 3))
    for rows, name, color in ((rows_a, names[0], "#4c72b0"), (rows_b, names[1], "#dd8452")):
        ratios = [word_count(r["rejected"]) / max(1, word_count(r["chosen"])) for r in rows]
        ax.hist(ratios, bins=25, alpha=0.55, label=name, color=color)
    ax.axvspan(*probes.LENGTH_BAND, color="#55a868", alpha=0.12, label="0.85-1.15")
    ax.set_xlabel("rejected words / chosen words (shared pairs)")
    ax.set_ylabel("pairs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "lengths.png", dpi=100, metadata={"Software": None})
    plt.close(fig)

    found = [
        {
            p["name"]: p
            for p in (report[x]["shared"]["probes"] or {}).get("probes", [])
            if p["kind"] == "accuracy" and p["value"] is not None
        }
        for x in ("a", "b")
    ]
    shown = [n for n in found[0] if n in found[1]]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(shown) + 1.2))
    for k, (f, name, color) in enumerate(zip(found, names, ("#4c72b0", "#dd8452"), strict=True)):
        ys = [i + (k - 0.5) * 0.38 for i in range(len(shown))]
        vals = [f[n]["value"] for n in shown]
        err = [
            [max(0.0, f[n]["value"] - f[n]["low"]) for n in shown],
            [max(0.0, f[n]["high"] - f[n]["value"]) for n in shown],
        ]
        ax.barh(ys, vals, height=0.36, color=color, alpha=0.8, label=name)
        ax.errorbar(vals, ys, xerr=err, fmt="none", ecolor="black", capsize=2)
    ax.axvline(0.5, color="grey", ls=":", lw=1)
    ax.axvline(probes.THRESHOLD, color="#c44e52", ls="--", lw=1, label="leak threshold")
    ax.set_yticks(range(len(shown)), shown, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("probe accuracy without the user, shared pairs (95% interval)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "probes.png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return {"lengths": "plots/lengths.png", "probes": "plots/probes.png"}


def release_name(spec: str) -> str:
    parts = [
        Path(p).stem
        for p in Path(spec.removeprefix("hf:")).parts
        if p not in ("/", ".", "..", "release")
    ]
    return parts[-1] if parts else spec or "release"


def compare(spec_a: str, spec_b: str, out: Path) -> dict:
    rows_a, info_a = load_rows(spec_a)
    rows_b, info_b = load_rows(spec_b)
    shared, matched_on = match(rows_a, rows_b)
    report = {"matched_on": matched_on, "shared": len(shared)}
    for side, spec, rows, info, pick in (
        ("a", spec_a, rows_a, info_a, 0),
        ("b", spec_b, rows_b, info_b, 1),
    ):
        report[side] = {
            "name": release_name(str(spec)),
            "source": info["source"],
            "all": figures(rows),
            "shared": figures([s[pick] for s in shared]),
            "keep": keep_rates(str(spec)),
            "warnings": info["warnings"],
        }
        if (report[side]["keep"] or {}).get("filters_mode", "record") != "record":
            for part in ("all", "shared"):  # a release that dropped: would_drop is always empty
                report[side][part]["would_keep"] = None
    report["table"] = table(report)
    report["plots"] = (
        plot(report, [s[0] for s in shared], [s[1] for s in shared], out / "plots")
        if shared
        else {}
    )
    for name in ("compare.md", "report.html"):
        template = "compare.md.j2" if name.endswith(".md") else "compare.html.j2"
        with atomic_write(out / name) as f:
            f.write(render(template, r=report))
    with atomic_write(out / "compare.json") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    return report
