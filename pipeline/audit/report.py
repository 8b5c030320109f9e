"""`prb audit RUN|RELEASE`: a report on how a run's pairs were built and filtered, or, for any
release in the public schema (pipeline/release/load.py), on what separates its pairs.

Writes `outputs/<run>/audit/`: `report.html` (with PNG plots in `plots/`), `summary.md`,
`audit.json` (every figure, machine-readable) and `records/<pair_id>.json` for the pairs the
report links to. Read-only on the run itself: it never changes a stage file.

Persona-blind accuracy is counted per judged order: each of the two A/B verdicts of a pair that
names an answer is a trial, a success when it names the chosen one; ties are left out (and
reported). A blind judge that cannot tell the answers apart sits at 50%; a Wilson interval that
excludes 50% means general quality leaks, in one direction or the other.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeline.audit import probes
from pipeline.checks import CHECKS, FilterConfig
from pipeline.checks.blind import trials
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
from pipeline.release.load import load_rows, user_key
from pipeline.release.manifest import read_funnel
from pipeline.reports import render
from pipeline.stages import stage
from pipeline.stats import LENGTH_BAND, wilson
from pipeline.store import atomic_write, current_drops, latest

CHECK = {c.name: c for c in CHECKS}

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


def blind_trials(records: list[FilterRecord]) -> tuple[int, int, int]:
    """(picked chosen, decisive verdicts, ties) over both orders of every judged pair."""
    k = n = ties = 0
    for f in records:
        a, b, c = trials(CHECK["blind"].read(f))
        k, n, ties = k + a, n + b, ties + c
    return k, n, ties


def blind_accuracy(records: list[FilterRecord]) -> dict:
    k, n, ties = blind_trials(records)
    out = {"picked_chosen": k, "decisive": n, "ties": ties, "accuracy": None, "ci95": None}
    if n:
        lo, hi = wilson(k, n)
        out.update(accuracy=round(k / n, 4), ci95=[round(lo, 4), round(hi, 4)])
    out["separated_pairs"] = sum(
        1 for f in records if (b := CHECK["blind"].read(f)) and b.picked != "none"
    )
    return out


def _ratio(f: FilterRecord) -> float | None:
    r = CHECK["length_ratio"].read(f)
    return None if r is None else r.ratio


def median_length_ratio(records: list[FilterRecord]) -> float | None:
    ratios = [x for f in records if (x := _ratio(f)) is not None]
    return round(statistics.median(ratios), 4) if ratios else None


# every check's per-pair figures (a check skipped for a pair leaves its columns empty)
FRAME = ("quality_chosen", "quality_rejected", "quality_gap", "adherence_chosen",
         "adherence_rejected", "length_ratio", "blind_k", "blind_n", "blind_separated")  # fmt: skip


def frame(records: list[FilterRecord]) -> pd.DataFrame:
    rows = []
    for f in records:
        p = f.pair
        row = {
            "pair_id": p.pair_id,
            "category": p.task.category,
            "strategy": p.rejected_strategy,
            "kept": f.kept,
            "reasons": f.reasons,
        }
        for c in CHECKS:
            result = c.read(f)
            row |= c.frame(result) if result is not None else {}
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in FRAME:
        if col not in df:
            df[col] = None
    return df.fillna({"blind_k": 0, "blind_n": 0, "blind_separated": False})


def breakdown(df: pd.DataFrame, by: str) -> list[dict]:
    out = []
    for key, g in df.groupby(by, sort=True):
        reasons = Counter(r for rs in g["reasons"] for r in rs)
        n_blind = int(g["blind_n"].sum())
        out.append(
            {
                by: key,
                "pairs": len(g),
                "kept": int(g["kept"].sum()),
                "keep_rate": round(float(g["kept"].mean()), 3),
                "blind_accuracy": round(int(g["blind_k"].sum()) / n_blind, 3) if n_blind else None,
                "blind_k": int(g["blind_k"].sum()),
                "blind_n": n_blind,
                "blind_separated": int(g["blind_separated"].sum()),
                "median_length_ratio": round(float(g["length_ratio"].median()), 3),
                "mean_quality_gap": _round(g["quality_gap"].mean()),
                "adherence_chosen": _round(g["adherence_chosen"].mean()),
                "adherence_rejected": _round(g["adherence_rejected"].mean()),
                "top_reason": reasons.most_common(1)[0][0] if reasons else "",
            }
        )
    return out


def _round(x: float, n: int = 3) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), n)


def severity(f: FilterRecord) -> float:
    """How far a pair is from 'differs only in personal fit'; larger is worse: each check's
    share, and a failed judge call weighs most."""
    score = 10.0 * len(f.errors)
    for c in CHECKS:
        result = c.read(f)
        score += c.severity(result) if result is not None else 0
    return round(score, 3)


def worst_pairs(records: list[FilterRecord], n: int = WORST_N) -> list[dict]:
    ranked = sorted(records, key=lambda f: (-severity(f), f.pair.pair_id))[:n]
    return [
        {
            "pair_id": f.pair.pair_id,
            "severity": severity(f),
            "kept": f.kept,
            "reasons": f.reasons,
            "flags": f.flags,
            "strategy": f.pair.rejected_strategy,
            "category": f.pair.task.category,
            "quality_gap": (q := CHECK["quality"].read(f)) and q.gap,
            "length_ratio": _ratio(f),
            "link": f"records/{f.pair.pair_id}.json",
        }
        for f in ranked
    ]


def warnings_for(blind: dict[str, dict], lengths: dict[str, float | None]) -> list[str]:
    out = []
    for subset, b in blind.items():
        if b["ci95"] and not b["ci95"][0] <= 0.5 <= b["ci95"][1]:
            out.append(
                f"persona-blind judge on {subset} pairs: accuracy {b['accuracy']:.1%}, 95% CI "
                f"[{b['ci95'][0]:.1%}, {b['ci95'][1]:.1%}] excludes 50%: the answers differ in "
                "general quality, not only in personal fit"
            )
    lo, hi = LENGTH_BAND
    for subset, m in lengths.items():
        if m is not None and not lo <= m <= hi:
            out.append(
                f"median length ratio (rejected/chosen words) on {subset} pairs is {m:.3f}, "
                f"outside {lo}-{hi}: length could stand in for personal fit"
            )
    return out


# --- plots --------------------------------------------------------------------------------------


def _plots(data: RunData, df: pd.DataFrame, fun: list[dict], out: Path) -> dict[str, str]:
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
    stages = [f["stage"] for f in fun][::-1]
    counts = [f["count"] for f in fun][::-1]
    ax.barh(stages, counts, color="#4c72b0")
    for y, n in enumerate(counts):
        ax.text(n, y, f" {n}", va="center")
    ax.set_xlabel("records")
    ax.set_title("Funnel, stage by stage")
    ax.set_xlim(0, max(counts + [1]) * 1.15)
    save(fig, "funnel.png")

    fig, axes = plt.subplots(1, 4, figsize=(12, 3), sharey=True)
    bins = [0.75 + 0.5 * i for i in range(10)]
    quality = [
        q for f in data.filters if (q := CHECK["quality"].read(f)) and q.chosen and q.rejected
    ]
    for ax, crit in zip(axes, ("mean", "correctness", "relevance", "helpfulness"), strict=True):
        vals = [
            [getattr(getattr(q, side), crit) for q in quality] for side in ("chosen", "rejected")
        ]  # side by side, so equal distributions show as twin bars, not one blended one
        ax.hist(vals, bins=bins, label=["chosen", "rejected"], color=["#55a868", "#c44e52"])
        ax.set_title(crit)
        ax.set_xlim(0.75, 5.25)
        ax.set_xlabel("judge score (1-5)")
    axes[0].set_ylabel("pairs")
    axes[0].legend()
    fig.suptitle("Quality judge scores: chosen vs rejected")
    save(fig, "quality.png")

    fig, ax = plt.subplots(figsize=(7, 3.2))
    t = data.thresholds
    ratios = df["length_ratio"].dropna() if len(df) else []
    lo = min([t.min_length_ratio * 0.9, *list(ratios)]) if len(ratios) else 0.5
    hi = max([t.max_length_ratio * 1.1, *list(ratios)]) if len(ratios) else 1.7
    edges = [lo + (hi - lo) * i / 30 for i in range(31)]
    ax.hist(list(ratios), bins=edges, color="#8172b2", alpha=0.5, label="all judged")
    if len(df):
        ax.hist(list(df.loc[df["kept"], "length_ratio"]), bins=edges, color="#8172b2", label="kept")
    ax.axvspan(*LENGTH_BAND, color="#55a868", alpha=0.12, label="0.85-1.15 (median target)")
    for x in (t.min_length_ratio, t.max_length_ratio):
        ax.axvline(x, color="#c44e52", ls="--", lw=1)
    ax.set_xlabel("length ratio (rejected words / chosen words); dashed: filter thresholds")
    ax.set_ylabel("pairs")
    ax.set_title("Length ratio")
    ax.legend(fontsize=8)
    save(fig, "length_ratio.png")

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
    for ax, by in zip(axes, ("strategy", "category"), strict=True):
        rows = breakdown(df, by) if len(df) else []
        names = [r[by].replace("_and_", " & ").replace("_", " ") for r in rows]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["keep_rate"] for r in rows], 0.4, label="keep rate")
        ax.bar(
            [x + 0.2 for x in xs],
            [r["blind_accuracy"] if r["blind_accuracy"] is not None else 0 for r in rows],
            0.4,
            label="blind accuracy (decisive verdicts)",
        )
        for x, r in zip(xs, rows, strict=True):  # how many verdicts each bar rests on
            label = f"{r['blind_k']}/{r['blind_n']}" if r["blind_n"] else "no verdict"
            ax.text(x + 0.2, (r["blind_accuracy"] or 0) + 0.02, label, ha="center", fontsize=7)
        ax.axhline(0.5, color="grey", ls=":", lw=1)
        ax.set_xticks(list(xs), names, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"By {by}")
    axes[0].legend(fontsize=8)
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
    return {"found": hit, "of": of, "share": _round(hit / of) if of else None,
            "tasks": len(found), "all_found": sum(a.found == a.of for a in found)}  # fmt: skip


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
        }[cfg.get("rubrics", {}).get("source", "planner")],  # fmt: skip
        "top_k": cfg.get("profile", {}).get("top_k"),
        "record_only": cfg.get("filters", {}).get("mode") == "record",
        "would_drop": dict(would.most_common()),
        "would_drop_pairs": sum(bool(f.would_drop) for f in data.filters),
        "agreement": rubric_agreement(data.rubrics),
    }


def compute(data: RunData, worst_n: int = WORST_N) -> dict:
    df = frame(data.filters)
    kept = [f for f in data.filters if f.kept]
    blind = {"all judged": blind_accuracy(data.filters), "kept": blind_accuracy(kept)}
    lengths = {"all judged": median_length_ratio(data.filters), "kept": median_length_ratio(kept)}
    return {
        "run_id": data.run_dir.name,
        "run_dir": str(data.run_dir),
        "simulated": data.manifest.get("simulated"),
        "recipe": recipe(data),
        "funnel": funnel(data),
        "blind": blind,
        "median_length_ratio": lengths,
        "length_band": list(LENGTH_BAND),
        "warnings": warnings_for(blind, lengths),
        "by_strategy": breakdown(df, "strategy") if len(df) else [],
        "by_category": breakdown(df, "category") if len(df) else [],
        "quality": {
            side: _round(df[f"quality_{side}"].mean()) if len(df) else None
            for side in ("chosen", "rejected")
        },
        "flags": dict(Counter(fl for f in data.filters for fl in f.flags)),
        "worst": worst_pairs(data.filters, worst_n),
        "thresholds": data.thresholds.model_dump(),
    }


def judge_probes(rows: list[dict], judge) -> list:
    """The judge probes (pipeline/audit/judge_probes.py) with `judge` = (run config, model id)."""
    import asyncio

    from pipeline.audit.judge_probes import run
    from pipeline.llm.client import session

    cfg, model = judge

    async def go():
        async with session(cfg) as llm:
            return await run(rows, llm, model or cfg.model.judge)

    return asyncio.run(go())


def probe_report(rows: list[dict], plots: Path, judge=None) -> dict:
    """The leakage probes of a release's rows, with their plots written under `plots`; with
    `judge` (run config, model), the judge probes too."""
    results = probes.run_all(rows) + (judge_probes(rows, judge) if judge else [])
    plots.mkdir(parents=True, exist_ok=True)
    probes.plot(results, plots / "probes.png")
    probes.plot_lengths(rows, plots / "lengths.png")
    return {**probes.summary(results),
            "plots": {"probes": "plots/probes.png", "lengths": "plots/lengths.png"}}  # fmt: skip


def probe_warnings(summary: dict) -> list[str]:
    if summary["verdict"] == "too few pairs":
        return [f"no verdict: {summary['pairs']} pairs, and the probes need at least "
                f"{summary['min_pairs']} to give one"]  # fmt: skip
    return [f"leakage probe: {name}" for name in summary["leaks"]]


def is_run(target: str | Path) -> bool:
    try:
        resolve_run(target)
        return True
    except AuditError:
        return False


def write_release_report(spec: str | Path, out: Path, judge=None) -> Path:
    """`prb audit` on any release in the public schema (not a prb run): the leakage probes."""
    rows, info = load_rows(spec)
    report = {**info, "pairs": len(rows), "users": len({user_key(r) for r in rows}),
              "by_category": dict(sorted(Counter(str(r["category"]) for r in rows).items())),
              "probes": probe_report(rows, out / "plots", judge)}  # fmt: skip
    report["warnings"] = [*info["warnings"], *probe_warnings(report["probes"])]
    for name, template in (("report.html", "release_audit.html.j2"),
                           ("summary.md", "release_audit.md.j2")):  # fmt: skip
        with atomic_write(out / name) as f:
            f.write(render(template, r=report))
    with atomic_write(out / "audit.json") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    return out


def write_report(run: str | Path, worst_n: int = WORST_N, judge=None) -> Path:
    run_dir = resolve_run(run)
    data = load_run(run_dir)
    if not data.personas:
        raise AuditError(f"{run_dir}: no personas.jsonl: not a run, or it has not started")
    out = run_dir / "audit"
    report = compute(data, worst_n)
    report["plots"] = _plots(data, frame(data.filters), report["funnel"], out / "plots")
    release = run_dir / "release"
    report["probes"] = None
    if (release / "README.md").exists():  # the released pairs, as anyone else would read them
        report["probes"] = probe_report(load_rows(release)[0], out / "plots", judge)
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
