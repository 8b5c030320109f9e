"""`prb eval`: score reward models on a release.

A pair is won only if the model scores `chosen` strictly above `rejected` (ties and failed calls
lose). Accuracy overall and per category comes with a percentile-bootstrap 95% CI (scipy), and
length bias sits next to it: how often the model preferred the longer answer. Results: a
Markdown and CSV leaderboard, a bar plot, and one JSON per model with every pair's scores.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np

from pipeline import progress
from pipeline.calls import LLMError, PermanentLLMError
from pipeline.eval.protocol import PROTOCOLS, chosen_first
from pipeline.eval.report import bar_plot, leaderboard, slug, write_table
from pipeline.eval.rewards import Query, RewardModel, checked, user_context
from pipeline.records import POINTS, PairScore, advantage
from pipeline.release.load import ReleaseError, load_rows  # noqa: F401  (re-exported)
from pipeline.reports import md
from pipeline.stats import bootstrap, word_count


def load_release(path: str | Path) -> list[dict]:
    """The rows of any release in the public schema (pipeline/release/load.py): prb's, the
    official hub layout (every config when there is no default), a flat file, or hf:NAME."""
    return load_rows(path)[0]


async def score_pairs(rm: RewardModel, rows: list[dict]) -> list[PairScore]:
    """One PairScore per row, in row order. A failed model call marks that pair lost, with the
    error recorded; a permanent error (bad key, unknown model) stops the evaluation."""
    shown = progress.stage(f"eval {rm.name}", total=len(rows))
    try:
        return await _score_pairs(rm, rows, shown)
    finally:
        shown.finish()


async def _score_pairs(rm: RewardModel, rows: list[dict], shown) -> list[PairScore]:

    def result(row, sc, sr, error=None, ab=None, ba=None) -> PairScore:
        return PairScore(
            ab=ab,
            ba=ba,
            id=row["id"],
            category=row["category"],
            score_chosen=sc,
            score_rejected=sr,
            won=sc is not None and sr is not None and sc > sr,
            words_chosen=word_count(row["chosen"]),
            words_rejected=word_count(row["rejected"]),
            error=error,
        )

    def queries(row) -> list[Query]:
        ctx = user_context(row, rm.context)
        return [Query(ctx, row["question"], row[k]) for k in ("chosen", "rejected")]

    if rm.batched:  # local models: one call per category over its answers, so batches fill
        by_category: dict[str, list[int]] = {}  # up (and never mix categories, as the public
        for i, row in enumerate(rows):  # scorer's runs, one subset each, never do)
            by_category.setdefault(row["category"], []).append(i)
        flat: list[float | None] = [None] * (2 * len(rows))
        why: dict[int, str] = {}  # flat index -> why it has no score
        for idx in by_category.values():
            scored, bad = checked(
                await rm.score_many([q for i in idx for q in queries(rows[i])]), 2 * len(idx)
            )
            for k, i in enumerate(idx):
                flat[2 * i], flat[2 * i + 1] = scored[2 * k], scored[2 * k + 1]
                for side in (0, 1):
                    if 2 * k + side in bad:
                        why[2 * i + side] = bad[2 * k + side]
            shown.done += len(idx)
        too_long = "an answer does not fit the model's context window with its question"

        def error(i: int) -> str | None:
            if None not in (flat[2 * i], flat[2 * i + 1]):
                return None
            return why.get(2 * i) or why.get(2 * i + 1) or too_long

        return [
            result(row, flat[2 * i], flat[2 * i + 1], error=error(i)) for i, row in enumerate(rows)
        ]

    # the published protocol: one A/B order per pair, drawn as its scorer draws it
    first = chosen_first(rows) if rm.protocol == "published" else None

    async def one(i, row) -> PairScore:
        scored = await _one(i, row)
        shown.advance()
        return scored

    async def _one(i, row) -> PairScore:
        c, r = queries(row)
        try:
            if rm.pairwise and first is not None:
                a, b = (c, r) if first[i] else (r, c)
                verdict = await rm.prefer(c.context, c.question, a.response, b.response)
                won = verdict == ("A" if first[i] else "B")
                return result(
                    row,
                    float(won),
                    float(not won),
                    ab=verdict if first[i] else None,
                    ba=None if first[i] else verdict,
                )
            if rm.pairwise:  # both A/B orders; a point per verdict, half a point per tie
                ab, ba = await asyncio.gather(
                    rm.prefer(c.context, c.question, c.response, r.response),
                    rm.prefer(c.context, c.question, r.response, c.response),
                )
                sc = advantage(ab, ba)
                return result(row, sc, 2 - sc, ab=ab, ba=ba)
            (sc, sr), bad = checked(await rm.score_many([c, r]), 2)
            if bad:
                return result(row, None, None, error=next(iter(bad.values())))
            return result(row, sc, sr)
        except PermanentLLMError:
            raise
        except LLMError as e:
            return result(row, None, None, error=f"{e.kind}: {e.detail}"[:300])

    return list(await asyncio.gather(*(one(i, row) for i, row in enumerate(rows))))


def accuracy(scores: list[PairScore], n_resamples: int = 1000, seed: int = 0) -> dict:
    won = [s.won for s in scores]
    lo, hi = bootstrap(won, seed, n_resamples=n_resamples)
    return {
        "n": len(won),
        "accuracy": float(np.mean(won)) if won else math.nan,
        "ci_low": lo,
        "ci_high": hi,
    }


def longer_preferred(scores: list[PairScore]) -> float:
    """Among pairs of unequal length that the model did not tie, the share where it scored the
    longer answer higher: 0.5 is no length bias, 1.0 always the longer."""
    votes = [
        (s.score_chosen > s.score_rejected) == (s.words_chosen > s.words_rejected)
        for s in scores
        if s.error is None
        and s.words_chosen != s.words_rejected
        and s.score_chosen != s.score_rejected
    ]
    return float(np.mean(votes)) if votes else math.nan


def metrics(scores: list[PairScore], n_resamples: int = 1000, seed: int = 0) -> dict:
    categories = sorted({s.category for s in scores})
    return {
        **accuracy(scores, n_resamples, seed),
        "per_category": {
            c: accuracy([s for s in scores if s.category == c], n_resamples, seed)
            for c in categories
        },
        "ties": sum(s.error is None and s.score_chosen == s.score_rejected for s in scores),
        "errors": sum(s.error is not None for s in scores),
        "longer_preferred": longer_preferred(scores),
        **position_split(scores),
    }


def position_split(scores: list[PairScore]) -> dict:
    """A pairwise judge's accuracy with chosen shown as A and as B (a tie half): a gap between
    them is position bias. Empty for pointwise models."""
    as_a = [POINTS[s.ab] for s in scores if s.ab in POINTS]
    as_b = [1.0 - POINTS[s.ba] for s in scores if s.ba in POINTS]
    if not as_a and not as_b:
        return {}
    return {
        "chosen_as_a": float(np.mean(as_a)) if as_a else None,
        "chosen_as_b": float(np.mean(as_b)) if as_b else None,
    }


def with_blind_variants(rms: list[RewardModel]) -> list[RewardModel]:
    """After each LLM judge that sees the user, the same judge without the user (context
    `none`): how much of its score needs the user. Not added when already asked for."""
    import dataclasses

    names = {rm.name for rm in rms}
    out = []
    for rm in rms:
        out.append(rm)
        if getattr(rm, "llm", None) is not None and rm.context != "none":
            blind = dataclasses.replace(
                rm, context="none", options={**rm.options, "context": "none"}
            )
            if blind.name not in names:
                blind.blind_of = rm.name
                out.append(blind)
    return out


def failed_models(results: list[dict]) -> dict[str, str]:
    """Models most of whose pairs are errors (endpoint failures, unscorable answers): their
    accuracy says nothing, and `prb eval` exits non-zero for them. model -> what happened."""
    out = {}
    for r in results:
        n, errors = r["metrics"]["n"], r["metrics"]["errors"]
        if n and errors * 2 > n:
            out[r["model"]] = f"{errors} of {n} pairs failed"
    return out


def _release_info(release: Path) -> dict:
    manifest = Path(release) / "manifest.json"
    info = {"path": str(release)}
    if manifest.is_file():
        m = json.loads(manifest.read_text(encoding="utf-8"))
        info |= {k: m.get(k) for k in ("name", "run_id", "simulated", "config_fingerprint")}
    return info


async def evaluate(
    release: Path,
    rms: list[RewardModel],
    n_resamples: int = 1000,
    seed: int = 0,
    rows: list[dict] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Score every model on the release (or its `rows`, read already): (rows, one result dict
    per model)."""
    rows = load_release(release) if rows is None else rows
    results = []
    for rm in rms:
        if hasattr(rm, "stage"):  # an LLM judge: its calls are counted under its own name
            rm.stage = f"eval {rm.name}"
        scores = await score_pairs(rm, rows)
        results.append(
            {
                "model": rm.name,
                "kind": rm.kind,
                "context": rm.context,
                "options": rm.options,
                "blind_of": getattr(rm, "blind_of", None),
                "release": _release_info(release),
                "protocol": rm.protocol,
                "scoring": f"{PROTOCOLS[rm.protocol].rules}; {PROTOCOLS[rm.protocol].ties}; "
                "errors lose",
                "bootstrap": {"resamples": n_resamples, "seed": seed, "method": "percentile"},
                "metrics": metrics(scores, n_resamples, seed),
                # contexts cut to fit the model (answers never are); None: not measured
                "truncation": dict(rm.truncation) if hasattr(rm, "truncation") else None,
                # verdicts the published protocol read as A (none found in the answer)
                "unparsed": getattr(rm, "unparsed", None) if rm.protocol == "published" else None,
                "pairs": [s.model_dump() for s in scores],
            }
        )
    return rows, results


def finite(value):
    """`value` with every NaN or ±inf float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def protocols_of(results: list[dict]):
    """The protocols the results were scored under, each once."""
    return [PROTOCOLS[name] for name in dict.fromkeys(r["protocol"] for r in results)]


def write_results(
    results: list[dict], rows: list[dict], out: Path, warnings: list[str] = ()
) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    models = out / "models"
    models.mkdir(exist_ok=True)
    for r in results:  # JSON, strictly: a figure with no value (NaN) is null
        (models / f"{slug(r['model'])}.json").write_text(
            json.dumps(finite(r), indent=2, sort_keys=True, allow_nan=False) + "\n",
            encoding="utf-8",
        )
    df = leaderboard(results)
    longer = np.mean([word_count(r["chosen"]) > word_count(r["rejected"]) for r in rows])
    notes = [
        *(f"Protocol `{p.name}`: {p.rules}. Ties: {p.ties}." for p in protocols_of(results)),
        f"{len(rows)} pairs. A pair is won only if chosen scores strictly above rejected "
        "(ties lose). CI: 95% percentile bootstrap.",
        f"`longer_preferred`: share of untied, unequal-length pairs where the model scored the "
        f"longer answer higher (0.5 = no length bias); chosen is the longer answer in "
        f"{longer:.0%} of pairs.",
        *(f"**Warning** (release): {md(w)}" for w in warnings),
    ]
    paths = {
        "markdown": out / "leaderboard.md",
        "csv": out / "leaderboard.csv",
        "plot": out / "accuracy.png",
        "models": models,
    }
    write_table(df, "Reward-model leaderboard", notes, paths)
    bar_plot(df, paths["plot"], "Personalized reward-model accuracy")
    return paths


async def run(
    release: Path,
    specs: list[str],
    cfg,
    *,
    context: str | None = None,
    out: Path,
    n_resamples: int = 1000,
    seed: int = 0,
    bon: dict | None = None,
    blind_variants: bool = True,
    protocol: str = "prb",
    public_prompts: str | None = None,
) -> dict:
    """What `prb eval` does: build the adapters, score the release, write the results; with
    `bon` (n, candidates, generator, oracle) also the Best-of-N check under out/bon/. `context`
    None: the protocol's (prb: profile; published: none)."""
    from pipeline.eval.models import parse_spec
    from pipeline.eval.protocol import ProtocolError
    from pipeline.eval.protocol import protocol as named
    from pipeline.llm.client import session

    rules = named(protocol)
    if rules.context is not None and context not in (None, rules.context):
        raise ProtocolError(
            f"--context {context}: the {protocol} protocol gives the model "
            f"{'the question only' if rules.context == 'none' else rules.context}"
            "; drop --context or use --protocol prb"
        )
    if bon is not None and protocol != "prb":
        raise ProtocolError(
            f"--protocol {protocol} scores the pairs only; Best-of-N runs under "
            "prb's protocol: drop --protocol"
        )
    context = context or rules.context or "profile"
    async with session(cfg) as llm:
        rms = [
            parse_spec(
                s,
                llm=llm,
                judge_model=cfg.model.judge,
                context=context,
                protocol=protocol,
                public_prompts=public_prompts,
            )
            for s in specs
        ]
        if blind_variants:
            rms = with_blind_variants(rms)
        rows, info = load_rows(release)
        rows, results = await evaluate(release, rms, n_resamples, seed, rows=rows)
        summary = {
            "leaderboard": leaderboard(results),
            "warnings": info["warnings"],
            "paths": write_results(results, rows, out, info["warnings"]),
            "failed": failed_models(results),
        }
        if bon is not None:
            summary["bon"] = await _run_bon(release, rows, rms, results, llm, cfg, out, seed, bon)
        summary["usage"] = llm.usage_dict()
        return summary


async def _run_bon(release, rows, rms, results, llm, cfg, out, seed, opts) -> dict:
    from pipeline.eval import bon

    n = opts["n"]
    if opts.get("candidates"):
        candidates = bon.load_candidates(opts["candidates"], n)
        if not {r["id"] for r in rows} & candidates.keys():  # nothing to score: no NaN summary
            raise bon.CandidatesError(
                f"{opts['candidates']}: none of its {len(candidates)} ids is a row of {release}: "
                "write the release's row ids (`id`)"
            )
        source = f"file {opts['candidates']}"
        failed = {r["id"]: "no candidates in the file" for r in rows if r["id"] not in candidates}
    else:
        manifest = Path(release) / "manifest.json"  # hf:NAME has none: the default budget
        budget = 100
        if manifest.is_file():
            config = json.loads(manifest.read_text("utf-8")).get("config", {})
            budget = config.get("generation", {}).get("word_budget", 100)
        generator = opts.get("generator") or cfg.model.generator
        candidates, failed = await bon.generate_candidates(llm, generator, rows, n, budget)
        source = f"generator `{generator}`"
    oracle = opts.get("oracle") or cfg.model.judge
    grades, oracle_failed = await bon.oracle_grades(llm, oracle, rows, candidates)
    bon_dir = out / "bon"
    bon_dir.mkdir(parents=True, exist_ok=True)
    with open(bon_dir / "candidates.jsonl", "w", encoding="utf-8") as f:
        for rid in sorted(candidates):
            f.write(json.dumps({"id": rid, "candidates": candidates[rid]}) + "\n")
    picks, model_failed = {}, {}
    for rm, r in zip(rms, results, strict=True):
        picks[r["model"]], model_failed[r["model"]] = await bon.best_of_n(
            rm, rows, candidates, grades, seed
        )
    info = {
        "release": str(release),
        "n": n,
        "source": source,
        "oracle": oracle,
        "prompts": len(grades),
        "skipped": {**failed, **oracle_failed},
        "oracle_best": float(np.mean([max(g) for g in grades.values()])) if grades else math.nan,
        "oracle_random": float(np.mean([np.mean(g) for g in grades.values()]))
        if grades
        else math.nan,
    }
    df, corr, paths = bon.write_bon(bon_dir, results, picks, model_failed, info)
    return {"leaderboard": df, "correlation": corr, "paths": paths, "info": info}
