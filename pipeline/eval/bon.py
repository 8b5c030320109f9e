"""`prb eval bon`: does benchmark accuracy predict Best-of-N quality downstream?

For each prompt of a release, N candidate answers (sampled from the generator through
pipeline/llm/ with N seeds, or read from a JSONL file); each reward model picks its best; an
oracle judge that sees the user's rubric aspects grades every candidate 0/1/2 per aspect, as in
the Personalized RewardBench paper. A model's Best-of-N win rate is how often its pick beats a
random candidate in the oracle's eyes (ties count half), computed exactly over the N. Across
models, Spearman's rho, Kendall's tau and NDCG say how well benchmark accuracy orders the models
by that win rate.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.metrics import ndcg_score

from pipeline.calls import LLMError, PermanentLLMError
from pipeline.errors import PrbError
from pipeline.eval.report import slug, write_table
from pipeline.eval.rewards import Query, RewardModel, user_context
from pipeline.llm.client import LLM
from pipeline.llm.prompts import load_prompt
from pipeline.records import BonPick, stable_id
from pipeline.reports import md

STAGE = "eval_bon"


class CandidatesError(PrbError, ValueError):
    """A candidates file that cannot be used; the message names the file and line."""


def load_candidates(path: Path, n: int) -> dict[str, list[str]]:
    """JSONL, one `{"id": <release row id>, "candidates": [str, ...]}` per line; the first n
    candidates of each are used."""
    out: dict[str, list[str]] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")  # not at U+2028
    except (OSError, UnicodeDecodeError) as e:
        raise CandidatesError(f"{path}: cannot read candidates: {e}") from e
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            cands = rec["candidates"]
            ok = isinstance(rec["id"], str) and isinstance(cands, list)
            ok = ok and all(isinstance(c, str) and c for c in cands)
        except (json.JSONDecodeError, KeyError, TypeError):
            ok = False
        if not ok or len(cands) < 2:
            raise CandidatesError(
                f"{path}:{no}: expected {{'id': str, 'candidates': [at least 2 non-empty str]}}"
            )
        out[rec["id"]] = cands[:n]
    return out


async def generate_candidates(
    llm: LLM, model: str, rows: list[dict], n: int, word_budget: int
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """N samples per prompt (seeds seed..seed+N-1); prompts whose generation failed are
    returned separately with the reason."""
    prompt = load_prompt("bon_candidate")

    async def one(row):
        variables = {
            "profile": row["profile"],
            "question": row["question"],
            "word_budget": word_budget,
        }
        calls = [
            llm.call(prompt, stage=STAGE, model=model, variables=variables, seed=llm.cfg.seed + k)
            for k in range(n)
        ]
        return [r.value for r in await asyncio.gather(*calls)]

    return await _per_row(rows, one)


async def oracle_grades(
    llm: LLM, model: str, rows: list[dict], candidates: dict[str, list[str]]
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Mean rubric score of every candidate, scaled to [0, 1] (2 = every aspect fully met)."""
    prompt = load_prompt("bon_oracle")

    async def one(row):
        aspects = row["rubric_aspects"]

        async def grade(answer: str) -> float:
            r = await llm.call(
                prompt,
                stage=STAGE,
                model=model,
                variables={"question": row["question"], "aspects": aspects, "answer": answer},
            )
            got = {s.index: s.score for s in r.value.scores}
            if set(got) != set(range(1, len(aspects) + 1)):
                raise LLMError("oracle_incomplete", f"graded aspects {sorted(got)}")
            return sum(got.values()) / (2 * len(aspects))

        return list(await asyncio.gather(*(grade(c) for c in candidates[row["id"]])))

    return await _per_row([r for r in rows if r["id"] in candidates], one)


async def _per_row(rows, fn):
    async def safe(row):
        try:
            return row["id"], await fn(row), None
        except PermanentLLMError:
            raise
        except LLMError as e:
            return row["id"], None, f"{e.kind}: {e.detail}"[:300]

    done, failed = {}, {}
    for rid, value, error in await asyncio.gather(*(safe(r) for r in rows)):
        if error is None:
            done[rid] = value
        else:
            failed[rid] = error
    return done, failed


def _argmax(scores: list[float], rng: random.Random) -> int:
    """The best candidate; ties broken by a seeded draw so candidate order carries no bias."""
    best = max(scores)
    return rng.choice([i for i, s in enumerate(scores) if s == best])


async def model_scores(
    rm: RewardModel, rows: list[dict], candidates: dict[str, list[str]]
) -> tuple[dict[str, list[float]], dict[str, str]]:
    def queries(row):
        ctx = user_context(row, rm.context)
        return [Query(ctx, row["question"], c) for c in candidates[row["id"]]]

    if rm.batched:
        flat = await rm.score_many([q for row in rows for q in queries(row)])
        out, start = {}, 0
        for row in rows:
            k = len(candidates[row["id"]])
            out[row["id"]], start = flat[start : start + k], start + k
        return out, {}

    async def one(row):
        qs = queries(row)
        return await rm.rank(qs[0].context, row["question"], [q.response for q in qs])

    return await _per_row(rows, one)


async def best_of_n(
    rm: RewardModel, rows: list[dict], candidates: dict, grades: dict, seed: int = 0
) -> tuple[list[BonPick], dict[str, str]]:
    rows = [r for r in rows if r["id"] in grades]
    scores, failed = await model_scores(rm, rows, candidates)
    picks = []
    for row in rows:
        if row["id"] not in scores:
            continue
        g = grades[row["id"]]
        pick = _argmax(scores[row["id"]], random.Random(stable_id("bon-tie", seed, row["id"])))
        # exact expectation over all N candidates, so no single random draw adds noise
        win = sum(1.0 if g[pick] > x else 0.5 if g[pick] == x else 0.0 for x in g) / len(g)
        picks.append(
            BonPick(
                id=row["id"],
                category=row["category"],
                scores=scores[row["id"]],
                pick=pick,
                oracle=g,
                win=win,
            )
        )
    return picks, failed


def correlation(accuracy: list[float], downstream: list[float]) -> dict:
    """How well benchmark accuracy orders models by downstream quality: Spearman's rho,
    Kendall's tau (tau-b) and NDCG of the accuracy ranking with downstream scores as gains
    (non-negative; NaN when every model does equally well downstream)."""
    acc, down = np.asarray(accuracy, float), np.asarray(downstream, float)
    if len(acc) < 2:
        return {
            "models": len(acc),
            "spearman": math.nan,
            "spearman_p": math.nan,
            "kendall": math.nan,
            "kendall_p": math.nan,
            "ndcg": math.nan,
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        rho = stats.spearmanr(acc, down)
        tau = stats.kendalltau(acc, down)
    return {
        "models": len(acc),
        "spearman": float(rho.statistic),
        "spearman_p": float(rho.pvalue),
        "kendall": float(tau.statistic),
        "kendall_p": float(tau.pvalue),
        # all models equally good downstream: no ranking to recover (sklearn would say 0 or 1)
        "ndcg": math.nan if np.ptp(down) == 0 else float(ndcg_score(down[None, :], acc[None, :])),
    }


def scatter_plot(
    df: pd.DataFrame,
    path: Path,
    corr: dict,
    y: str = "bon_win_rate",
    ylabel: str = "Best-of-N win rate vs a random candidate",
    baseline: float = 0.5,
) -> None:
    from pipeline.reports import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(df["accuracy"], df[y], color="#4c72b0")
    for _, r in df.iterrows():
        ax.annotate(
            r["model"], (r["accuracy"], r[y]), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.axhline(baseline, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("benchmark accuracy")
    ax.set_ylabel(ylabel)
    ax.set_title(
        f"Spearman {corr['spearman']:.2f}, Kendall {corr['kendall']:.2f}, NDCG {corr['ndcg']:.2f}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_bon(
    out: Path,
    eval_results: list[dict],
    picks: dict[str, list[BonPick]],
    failed: dict[str, dict[str, str]],
    info: dict,
) -> tuple[pd.DataFrame, dict, dict[str, Path]]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "models").mkdir(exist_ok=True)
    rows = []
    for r in eval_results:
        p = picks[r["model"]]
        row = {
            "model": r["model"],
            "context": r["context"],
            "accuracy": r["metrics"]["accuracy"],
            "bon_win_rate": float(np.mean([x.win for x in p])) if p else math.nan,
            "bon_quality": float(np.mean([x.oracle[x.pick] for x in p])) if p else math.nan,
            "prompts": len(p),
            "errors": len(failed[r["model"]]),
        }
        rows.append(row)
        detail = {**row, "picks": [x.model_dump() for x in p], "failed": failed[r["model"]]}
        (out / "models" / f"{slug(r['model'])}.json").write_text(
            json.dumps(detail, indent=2, sort_keys=True) + "\n", "utf-8"
        )
    df = pd.DataFrame(rows).sort_values(["bon_win_rate", "model"], ascending=[False, True])
    df = df.reset_index(drop=True)
    ok = df.dropna(subset=["accuracy", "bon_win_rate"])
    corr = {
        "win_rate": correlation(ok["accuracy"].tolist(), ok["bon_win_rate"].tolist()),
        "quality": correlation(ok["accuracy"].tolist(), ok["bon_quality"].tolist()),
    }
    c = corr["win_rate"]
    notes = [
        f"{info['prompts']} prompts, N = {info['n']} candidates ({md(info['source'])}); oracle "
        f"{md(info['oracle'])} grades each rubric aspect 0/1/2. Mean oracle quality: best "
        f"candidate {info['oracle_best']:.3f}, random candidate {info['oracle_random']:.3f}.",
        "Accuracy under protocol `prb` (ties lose); a reward model's tie among the candidates "
        "is broken by a seeded draw; the win rate against a random candidate counts oracle ties "
        "half.",
        f"Accuracy vs Best-of-N win rate over {c['models']} models: Spearman rho = "
        f"{c['spearman']:.3f}, Kendall tau = {c['kendall']:.3f}, NDCG = {c['ndcg']:.3f}.",
    ]
    paths = {
        "markdown": out / "bon_leaderboard.md",
        "csv": out / "bon_leaderboard.csv",
        "plot": out / "bon_vs_accuracy.png",
        "summary": out / "bon_summary.json",
    }
    write_table(df, "Best-of-N downstream check", notes, paths)
    paths["summary"].write_text(
        json.dumps({**info, "correlation": corr}, indent=2, sort_keys=True) + "\n", "utf-8"
    )
    scatter_plot(df, paths["plot"], c)
    return df, corr, paths
