"""`prb audit RUN|RELEASE`: a report on how a run's pairs were built and filtered, or, for any
release in the public schema (pipeline/release/load.py), on what separates its pairs.

Writes `outputs/<run>/audit/`: `report.html` (with PNG plots in `plots/`), `summary.md`,
`audit.json` (every figure, machine-readable) and `records/<pair_id>.json` for the pairs the
report links to. Read-only on the run itself: it never changes a stage file.

What each check shows is its own declaration (`Report.figures`, read by
pipeline/release/figures.py): this module names no check.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import probes
from pipeline.audit.null import null_test
from pipeline.audit.null import warnings as null_warnings
from pipeline.checks import CHECKS, FilterConfig
from pipeline.checks.base import Figure
from pipeline.errors import PrbError
from pipeline.paths import resolve_path
from pipeline.records import (
    AnnotationRecord,
    Dropped,
    FilterRecord,
    Pair,
    Persona,
    RubricRecord,
    Task,
)
from pipeline.release import figures
from pipeline.release.load import load_rows, user_key
from pipeline.release.manifest import read_funnel
from pipeline.reports import render
from pipeline.stages import stage
from pipeline.store import atomic_write, current_drops, latest

WORST_N = 10


class AuditError(PrbError, ValueError):
    pass


def resolve_run(run: str | Path) -> Path:
    """A run dir path, or a run id under outputs/."""
    path = Path(run)
    if path.is_dir() and (path / "personas.jsonl").exists():
        return path.resolve()
    candidate = resolve_path("outputs") / str(run)
    plain_id = "/" not in str(run) and "\\" not in str(run) and str(run) not in ("", ".", "..")
    if plain_id and (candidate / "personas.jsonl").exists():
        return candidate
    raise AuditError(f"{run}: neither a run directory nor a run id under {candidate.parent}")


@dataclass
class RunData:
    run_dir: Path
    personas: list[Persona]
    tasks: list[Task]
    rubrics: list[RubricRecord]
    pairs: list[Pair]
    filters: list[FilterRecord]
    dropped: list[Dropped]
    annotations: list[AnnotationRecord]
    manifest: dict = field(default_factory=dict)

    @property
    def thresholds(self) -> FilterConfig:
        cfg = self.manifest.get("config", {}).get("filters")
        return FilterConfig.model_validate(cfg) if cfg else FilterConfig()


def load_run(run_dir: Path) -> RunData:
    def current(name: str) -> list:  # a resumed run's retried record supersedes its earlier line
        s = stage(name)
        return latest(s.file(run_dir).read(), s.output_id or id)

    manifest_path = run_dir / "release" / "manifest.json"
    plans, made = current("rubrics"), current("pairs")
    produced = {
        "rubrics": set(map(stage("rubrics").output_id, plans)),
        "pairs": set(map(stage("pairs").output_id, made)),
    }
    return RunData(
        run_dir=run_dir,
        personas=current("personas"),
        tasks=current("questions"),
        rubrics=plans,
        pairs=made,
        filters=current("filters"),
        dropped=current_drops(run_dir, produced),
        annotations=current("annotation"),
        manifest=json.loads(manifest_path.read_text()) if manifest_path.exists() else {},
    )


# --- figures ------------------------------------------------------------------------------------


def funnel(data: RunData) -> list[dict]:
    """Stage by stage: how many records came out, and why the others did not: as the build
    counted it (`funnel.json`, written after every stage), never recounted here."""
    return read_funnel(data.run_dir) or []


def pair_rows(records: list[FilterRecord]) -> list[dict]:
    """Each judged pair: who it is, whether it was kept, and every check's figures."""
    return [
        {
            "pair_id": f.pair.pair_id,
            "category": f.pair.task.category,
            "strategy": f.pair.rejected_strategy,
            "kept": f.kept,
            "reasons": f.reasons,
            "figures": figures.of_record(f),
        }
        for f in records
    ]


def breakdown(rows: list[dict], by: str) -> list[dict]:
    """Per strategy (or category): pairs, keep rate, the top drop reason and every figure."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(str(row[by]), []).append(row)
    out = []
    for key, g in sorted(groups.items()):
        reasons = Counter(r for row in g for r in row["reasons"])
        kept = sum(row["kept"] for row in g)
        out.append(
            {
                by: key,
                "pairs": len(g),
                "kept": kept,
                "keep_rate": round(kept / len(g), 3),
                "figures": {
                    s["key"]: s for s in figures.summarize_all([row["figures"] for row in g])
                },
                "top_reason": reasons.most_common(1)[0][0] if reasons else "",
            }
        )
    return out


def severity(f: FilterRecord) -> float:
    """How far a pair is from 'differs only in personal fit'; larger is worse: each check's
    share, and a failed judge call weighs most."""
    score = 10.0 * len(f.errors)
    for c in CHECKS:
        result = c.read(f)
        score += c.report.severity(result) if result is not None else 0
    return round(score, 3)


def worst_pairs(records: list[FilterRecord], n: int = WORST_N) -> list[dict]:
    ranked = sorted(records, key=lambda f: (-severity(f), f.pair.pair_id))[:n]
    shown = [f for _, f in figures.declared() if f.summary != "share"]
    out = []
    for f in ranked:
        values = figures.of_record(f)
        out.append(
            {
                "pair_id": f.pair.pair_id,
                "severity": severity(f),
                "kept": f.kept,
                "reasons": f.reasons,
                "flags": f.flags,
                "strategy": f.pair.rejected_strategy,
                "category": f.pair.task.category,
                "link": f"records/{f.pair.pair_id}.json",
                "figures": {
                    fig.label: figures.show(fig, values[fig.key])
                    for fig in shown
                    if fig.key in values
                },
            }
        )
    return out


# --- plots --------------------------------------------------------------------------------------


def _funnel(ax, funnel: list[dict]) -> None:
    stages = [f["stage"] for f in funnel][::-1]
    counts = [f["count"] for f in funnel][::-1]
    ax.barh(stages, counts, color="#4c72b0")
    for y, n in enumerate(counts):
        ax.text(n, y, f" {n}", va="center")
    ax.set_xlabel("records")
    ax.set_title("Funnel, stage by stage")
    ax.set_xlim(0, max(counts + [1]) * 1.15)


def _panel(ax, f: Figure, rows: list[dict], settings) -> None:
    """One figure of a check over the judged pairs: chosen and rejected side by side, or all
    judged under kept; its expected band and the check's thresholds drawn on it."""
    import numpy as np

    values = [(row["figures"].get(f.key), row["kept"]) for row in rows]
    values = [(v, kept) for v, kept in values if v is not None]
    if f.summary == "sides":  # side by side, so equal distributions show as twin bars
        ax.hist(
            [[float(v[0]) for v, _ in values], [float(v[1]) for v, _ in values]],
            bins=12,
            range=f.span,
            label=["chosen", "rejected"],
            color=["#55a868", "#c44e52"],
        )
    else:
        edges = list(np.histogram_bin_edges([float(v) for v, _ in values], bins=30, range=f.span))
        ax.hist(
            [float(v) for v, _ in values],
            bins=edges,
            color="#8172b2",
            alpha=0.5,
            label="all judged",
        )
        ax.hist([float(v) for v, kept in values if kept], bins=edges, color="#8172b2", label="kept")
    if f.expect and f.expect[0] < f.expect[1]:
        ax.axvspan(*f.expect, color="#55a868", alpha=0.12, label="expected")
    for x in f.lines(settings):
        ax.axvline(x, color="#c44e52", ls="--", lw=1)
    ax.set_title(f.label, fontsize=8)
    ax.set_ylabel("pairs")
    ax.legend(fontsize=7)


def _breakdown(ax, groups: list[dict], by: str, shares: list[Figure]) -> None:
    """Keep rate and each share figure per strategy or category, each bar with its k/n."""
    names = [g[by].replace("_and_", " & ").replace("_", " ") for g in groups]
    width = 0.8 / (1 + len(shares))
    xs = range(len(groups))
    ax.bar(
        [x - 0.4 + width / 2 for x in xs],
        [g["keep_rate"] for g in groups],
        width,
        label="keep rate",
    )
    for i, f in enumerate(shares, 1):
        found = [g["figures"].get(f.key) for g in groups]
        xi = [x - 0.4 + width * (i + 0.5) for x in xs]
        ax.bar(xi, [(s or {}).get("value") or 0 for s in found], width, label=f.label)
        for x, s in zip(xi, found, strict=True):  # how many trials each bar rests on
            label = f"{s['k']}/{s['n']}" if s and s.get("n") else "n/a"
            ax.text(x, ((s or {}).get("value") or 0) + 0.02, label, ha="center", fontsize=7)
    ax.axhline(0.5, color="grey", ls=":", lw=1)
    ax.set_xticks(list(xs), names, fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_title(f"By {by}")


def _plots(data: RunData, rows: list[dict], report: dict, out: Path) -> dict[str, str]:
    """The report's plots, from the pair rows and the figures `compute` made of them."""
    from pipeline.reports import pyplot

    plt = pyplot()
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=100, metadata={"Software": None})
        plt.close(fig)
        files[name.removesuffix(".png")] = f"plots/{name}"

    fig, ax = plt.subplots(figsize=(7, 3.2))
    _funnel(ax, report["funnel"])
    save(fig, "funnel.png")

    for check in CHECKS:  # one plot per check: a panel per figure it declares for plotting
        shown = [
            f
            for f in check.report.figures
            if f.plot
            and f.summary != "share"
            and any(row["figures"].get(f.key) is not None for row in rows)
        ]
        if not shown:
            continue
        settings = check.settings.model_validate(
            data.thresholds.model_dump(include=set(check.settings.model_fields))
        )
        fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown) + 1, 3), squeeze=False)
        for ax, f in zip(axes[0], shown, strict=True):
            _panel(ax, f, rows, settings)
        fig.suptitle(f"Check: {check.name}")
        save(fig, f"check_{check.name}.png")

    shares = [f for _, f in figures.declared() if f.summary == "share"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
    for ax, by in zip(axes, ("strategy", "category"), strict=True):
        _breakdown(ax, report[f"by_{by}"], by, shares)
    axes[0].legend(fontsize=7)
    save(fig, "breakdowns.png")
    return files


# --- report -------------------------------------------------------------------------------------


def rubric_agreement(rubrics: list[RubricRecord]) -> dict | None:
    """rubrics.source both: how many of the users' imported aspects the planner found too."""
    found = [r.agreement for r in rubrics if r.agreement is not None]
    if not found:
        return None
    of = sum(a.of for a in found)
    hit = sum(a.found for a in found)
    return {
        "found": hit,
        "of": of,
        "share": round(hit / of, 3) if of else None,
        "tasks": len(found),
        "all_found": sum(a.found == a.of for a in found),
    }


def recipe(data: RunData) -> dict:
    """How the run was built, and what record-only checks would have dropped."""
    cfg = data.manifest.get("config", {})
    would = Counter(r for f in data.filters for r in f.would_drop)
    return {
        "name": cfg.get("recipe", "prb"),
        "rubrics_source": {
            "planner": "derived by the planner",
            "imported": "the users' own (imported)",
            "both": "the users' own (imported), the planner's recorded beside",
        }[cfg.get("rubrics", {}).get("source", "planner")],
        "top_k": cfg.get("profile", {}).get("top_k"),
        "record_only": cfg.get("filters", {}).get("mode") == "record",
        "would_drop": dict(would.most_common()),
        "would_drop_pairs": sum(bool(f.would_drop) for f in data.filters),
        "agreement": rubric_agreement(data.rubrics),
    }


def figure_table(found: dict[str, list[dict]]) -> list[dict]:
    """One line per figure: its text over all judged pairs and over the kept ones."""
    kept = {s["key"]: s for s in found["kept"]}
    return [
        {
            "label": s["label"],
            "warn": s["warn"] or kept.get(s["key"], {}).get("warn", False),
            "all": s["text"],
            "all_pairs": s["pairs"],
            "kept": kept.get(s["key"], {}).get("text", "–"),
            "kept_pairs": kept.get(s["key"], {}).get("pairs", 0),
        }
        for s in found["all judged"]
    ]


def compute(data: RunData, rows: list[dict], worst_n: int = WORST_N) -> dict:
    """Every figure of the report; `rows` are `pair_rows(data.filters)`."""
    found = {
        "all judged": figures.summarize_all([r["figures"] for r in rows]),
        "kept": figures.summarize_all([r["figures"] for r in rows if r["kept"]]),
    }
    return {
        "run_id": data.run_dir.name,
        "run_dir": str(data.run_dir),
        "simulated": data.manifest.get("simulated"),
        "recipe": recipe(data),
        "funnel": funnel(data),
        "figures": found,
        "figure_table": figure_table(found),
        # the figures the breakdown tables show, one column each
        "columns": [
            [s["key"], s["label"]]
            for s in found["all judged"]
            if s["key"] in figures.in_breakdowns()
        ],
        "warnings": [w for subset, f in found.items() for w in figures.warnings(subset, f)],
        "by_strategy": breakdown(rows, "strategy"),
        "by_category": breakdown(rows, "category"),
        "flags": dict(Counter(fl for f in data.filters for fl in f.flags)),
        "worst": worst_pairs(data.filters, worst_n),
        "thresholds": data.thresholds.model_dump(),
    }


def judge_probes(rows: list[dict], judge) -> list:
    """The judge probes (the `judge` family of pipeline/probes/) with `judge` = (run config,
    model id) or (run config, model id, "position-free")."""
    import asyncio

    from pipeline.llm.client import session

    cfg, model, *mode = judge

    async def go():
        async with session(cfg) as llm:
            free = mode == ["position-free"]
            return await probes.run_judges(rows, llm, model or cfg.model.judge, free)

    return asyncio.run(go())


def probe_report(rows: list[dict], plots: Path, judge=None, null: int = 0) -> dict:
    """The leakage probes of a release's rows, with their plots written under `plots`; with
    `judge` (run config, model), the judge probes too; with `null` > 0, the null test on that
    many relabelled copies (pipeline/audit/null.py)."""
    results = probes.run_all(rows) + (judge_probes(rows, judge) if judge else [])
    plots.mkdir(parents=True, exist_ok=True)
    probes.plot(results, plots / "probes.png")
    probes.plot_lengths(rows, plots / "lengths.png")
    return {
        **probes.summary(results),
        "null": null_test(rows, results, null) if null else None,
        "plots": {"probes": "plots/probes.png", "lengths": "plots/lengths.png"},
    }


def probe_warnings(summary: dict) -> list[str]:
    if summary["verdict"] == "too few pairs":
        return [
            f"no verdict: {summary['pairs']} pairs, and the probes need at least "
            f"{summary['min_pairs']} to give one"
        ]
    return (
        [f"leakage probe: {name}" for name in summary["leaks"]]
        + [f"floor probe (easy): {name}" for name in summary["easy_by"]]
        + [f"judge probe: {name}" for name in summary["judge_flags"]]
        + null_warnings(summary.get("null"))
    )


def is_run(target: str | Path) -> bool:
    try:
        resolve_run(target)
        return True
    except AuditError:
        return False


def write_release_report(spec: str | Path, out: Path, judge=None, null: int = 0) -> Path:
    """`prb audit` on any release in the public schema (not a prb run): the leakage probes."""
    rows, info = load_rows(spec)
    report = {
        **info,
        "pairs": len(rows),
        "users": len({user_key(r) for r in rows}),
        "by_category": dict(sorted(Counter(str(r["category"]) for r in rows).items())),
        "probes": probe_report(rows, out / "plots", judge, null),
    }
    report["warnings"] = [*info["warnings"], *probe_warnings(report["probes"])]
    for name, template in (
        ("report.html", "release_audit.html.j2"),
        ("summary.md", "release_audit.md.j2"),
    ):
        with atomic_write(out / name) as f:
            f.write(render(template, r=report))
    with atomic_write(out / "audit.json") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    return out


def write_report(run: str | Path, worst_n: int = WORST_N, judge=None, null: int = 0) -> Path:
    run_dir = resolve_run(run)
    data = load_run(run_dir)
    if not data.personas:
        raise AuditError(f"{run_dir}: no personas.jsonl: not a run, or it has not started")
    out = run_dir / "audit"
    rows = pair_rows(data.filters)  # every check's result read once, for figures and plots
    report = compute(data, rows, worst_n)
    report["plots"] = _plots(data, rows, report, out / "plots")
    release = run_dir / "release"
    report["probes"] = None
    if (release / "README.md").exists():  # the released pairs, as anyone else would read them
        report["probes"] = probe_report(load_rows(release)[0], out / "plots", judge, null)
        report["warnings"] += probe_warnings(report["probes"])
    by_id = {f.pair.pair_id: f for f in data.filters}
    (out / "records").mkdir(parents=True, exist_ok=True)
    for w in report["worst"]:
        with atomic_write(out / w["link"]) as f:
            json.dump(by_id[w["pair_id"]].model_dump(mode="json"), f, indent=2, sort_keys=True)
    for name, template in (("report.html", "audit.html.j2"), ("summary.md", "audit.md.j2")):
        with atomic_write(out / name) as f:
            f.write(render(template, r=report))
    with atomic_write(out / "audit.json") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    return out
