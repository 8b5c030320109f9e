"""Stage 7 — release: one Parquet per category config (split `test`), a dataset card and a
manifest. Same inputs and cache give byte-identical files: rows are sorted by id and nothing
time- or host-dependent goes into them. The folder is built aside and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import datasets
import yaml

from pipeline.annotation import releasable
from pipeline.cache import ResponseCache
from pipeline.config import RunConfig
from pipeline.prompts import all_prompts
from pipeline.records import AnnotationRecord, FilterRecord

RELEASED_COLUMNS = (
    "id",
    "question",
    "profile",
    "rubric_aspects",
    "narrative",
    "category",
    "chosen",
    "rejected",
)
_SCORES = {k: datasets.Value("int32") for k in ("correctness", "relevance", "helpfulness")}
FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "profile": datasets.List({k: datasets.Value("string") for k in ("id", "category", "text")}),
        "rubric_aspects": datasets.List(
            {k: datasets.Value("string") for k in ("aspect", "evidence", "reason")}
        ),
        "narrative": datasets.Value("string"),
        "category": datasets.Value("string"),
        "chosen": datasets.Value("string"),
        "rejected": datasets.Value("string"),
        # provenance
        "persona_id": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        "rejected_strategy": datasets.Value("string"),
        "quality": {"chosen": _SCORES, "rejected": _SCORES},
        "pair_checks": {
            "quality_gap": datasets.Value("float64"),
            "adherence_chosen": datasets.Value("float64"),
            "adherence_rejected": datasets.Value("float64"),
            "blind_ab": datasets.Value("string"),
            "blind_ba": datasets.Value("string"),
            "blind_picked": datasets.Value("string"),
            "length_ratio": datasets.Value("float64"),
            "answer_similarity": datasets.Value("float64"),
        },
        "annotation": {
            "verdict": datasets.Value("string"),
            "n_labels": datasets.Value("int32"),
            "chosen_votes": datasets.Value("int32"),
            "rejected_votes": datasets.Value("int32"),
            "tie_votes": datasets.Value("int32"),
        },
        "generator_model": datasets.Value("string"),
        "judge_model": datasets.Value("string"),
        "prompt_versions": datasets.List(
            {"task": datasets.Value("string"), "ref": datasets.Value("string")}
        ),
    }
)
datasets.disable_progress_bars()
PACKAGES = ("prb", "openai", "datasets", "pyarrow", "pandas", "prefect", "pydantic", "tenacity")


def to_row(f: FilterRecord, ann: AnnotationRecord) -> dict:
    p, c = f.pair, f.checks
    return {
        "id": p.pair_id,
        "question": p.task.question,
        "profile": [i.model_dump() for i in p.task.persona.profile],
        "rubric_aspects": [a.model_dump() for a in p.rubric_aspects],
        "narrative": p.narrative,
        "category": p.task.category,
        "chosen": p.chosen,
        "rejected": p.rejected,
        "persona_id": p.task.persona.persona_id,
        "question_id": p.task.question_id,
        "rejected_strategy": p.rejected_strategy,
        "quality": {
            "chosen": c.quality_chosen.model_dump(exclude={"rationale"}),
            "rejected": c.quality_rejected.model_dump(exclude={"rationale"}),
        },
        "pair_checks": {
            "quality_gap": c.quality_gap,
            "adherence_chosen": c.adherence_chosen,
            "adherence_rejected": c.adherence_rejected,
            "blind_ab": c.blind.ab,
            "blind_ba": c.blind.ba,
            "blind_picked": c.blind.picked,
            "length_ratio": c.length_ratio,
            "answer_similarity": c.answer_similarity,
        },
        "annotation": ann.model_dump(exclude={"pair_id"}),
        "generator_model": p.generator_model,
        "judge_model": f.judge_model,
        "prompt_versions": [{"task": k, "ref": v} for k, v in sorted(p.prompt_versions.items())],
    }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_path(category: str) -> str:
    return f"{category}/test-00000-of-00001.parquet"


def token_usage(cache: ResponseCache, keys_by_stage: dict[str, list[str]]) -> dict[str, dict]:
    """Tokens of the answers the run used, per stage, read from the cache so that a resumed or
    repeated run reports the same figures as an uninterrupted one."""
    out = {}
    for stage, keys in keys_by_stage.items():
        prompt = completion = 0
        for key in keys:
            entry = cache.get(key)
            if entry:
                prompt += entry[1].get("prompt_tokens", 0) or 0
                completion += entry[1].get("completion_tokens", 0) or 0
        out[stage] = {"calls": len(keys), "prompt_tokens": prompt, "completion_tokens": completion}
    return out


def render_card(cfg: RunConfig, manifest: dict, counts: dict[str, int]) -> str:
    categories = [c for c in cfg.personas.categories if counts.get(c)]
    header = {
        "pretty_name": "Personalized RewardBench (prb build)",
        "license": cfg.release.license,
        "language": ["en"],
        "task_categories": ["text-classification"],
        "tags": ["reward-modeling", "personalization", "preference-pairs"]
        + (["simulated"] if cfg.simulated else []),
        "configs": [
            {
                "config_name": "all",
                "default": True,
                "data_files": [{"split": "test", "path": "*/test-*.parquet"}],
            }
        ]
        + [
            {"config_name": c, "data_files": [{"split": "test", "path": data_path(c)}]}
            for c in categories
        ],
    }
    funnel = "\n".join(f"| {f['stage']} | {f['count']} |" for f in manifest["funnel"])
    prompts = "\n".join(f"- `{v['ref']}`" for v in manifest["prompts"].values())
    thresholds = "\n".join(f"- `{k}`: {v}" for k, v in manifest["config"]["filters"].items())
    per_cat = "\n".join(f"| {c} | {counts.get(c, 0)} |" for c in categories)
    sim_note = (
        "**Built on the bundled simulator (`simulated: true`)**: answers and judgements come from "
        "a deterministic stand-in model, so this release exercises the pipeline, not real model "
        "behaviour.\n\n"
        if cfg.simulated
        else ""
    )
    body = f"""# {cfg.release.name}

{sim_note}A benchmark of preference pairs for reward models. Each row is one user (a profile of
their own past questions and posts), one question from that user, the rubric aspects this user
would judge an answer by, and two answers: `chosen` follows those aspects, `rejected` ignores or
violates them. Both answers carry the same key points under the same word budget, and were
checked to be equally correct, relevant and helpful, so the only thing that separates them is
personal fit. A reward model scores a pair as won only if it rates `chosen` strictly above
`rejected` for that user.

## Configs and size

| config | pairs (split `test`) |
|---|---|
{per_cat}

## How the pairs were built

| stage | count |
|---|---|
{funnel}

1. personas sampled from the persona library (seed {cfg.seed}), stratified by category;
2. one question per persona from the question pools;
3. a planner derives rubric aspects (with evidence citing profile items) and a narrative;
4. a shared content plan, then `chosen` (follows every aspect) and `rejected` (same points,
   named strategy that misses the aspects), each at most {cfg.generation.word_budget} words;
5. filters: quality judge per answer, rubric adherence per aspect, a persona-blind judge in both
   A/B orders, length ratio and near-duplicate checks;
6. human annotation verdicts ({"required" if cfg.annotation.required else "not required"});
7. this release.

Generator: `{cfg.model.generator}`; judge: `{cfg.model.judge}`. Prompts:
{prompts}

Filter thresholds:
{thresholds}

## Columns

`{"`, `".join(RELEASED_COLUMNS)}` as in the public Personalized RewardBench release, then
provenance: `persona_id`, `question_id`, `rejected_strategy`, `quality` (judge scores per
answer), `pair_checks`, `annotation`, `generator_model`, `judge_model`, `prompt_versions`.

## Known limitations

- Personas are curated and synthetic; profile items imply preferences but do not cover every
  dimension for every user.
- Automatic judges can share the generator's blind spots; the persona-blind check and human
  annotation reduce, not remove, that risk.

## Provenance

`manifest.json` lists the config, seeds, model ids, prompt hashes, package versions, the funnel
and a SHA-256 of every data file. Licence: {cfg.release.license}.
"""
    return "---\n" + yaml.safe_dump(header, sort_keys=False) + "---\n\n" + body


def run(
    cfg: RunConfig,
    run_dir: Path,
    filtered: list[FilterRecord],
    annotations: list[AnnotationRecord],
    funnel: dict[str, int],
    drop_reasons: dict[str, int],
    cache: ResponseCache,
    keys_by_stage: dict[str, list[str]],
) -> Path:
    verdicts = {a.pair_id: a for a in annotations}
    rows = sorted(
        (
            to_row(f, verdicts[f.pair.pair_id])
            for f in filtered
            if f.kept and f.pair.pair_id in verdicts and releasable(cfg, verdicts[f.pair.pair_id])
        ),
        key=lambda r: (r["category"], r["id"]),
    )
    funnel = {**funnel, "released": len(rows)}
    final = run_dir / "release"
    tmp = Path(tempfile.mkdtemp(dir=run_dir, prefix=".release-"))
    try:
        counts: dict[str, int] = {}
        for category in cfg.personas.categories:
            subset = [r for r in rows if r["category"] == category]
            if not subset:
                continue
            counts[category] = len(subset)
            path = tmp / data_path(category)
            path.parent.mkdir(parents=True)
            datasets.Dataset.from_list(subset, features=FEATURES).to_parquet(str(path))
        prompts = all_prompts()
        manifest = {
            "name": cfg.release.name,
            "run_id": cfg.run_id,
            "simulated": cfg.simulated,
            "config_fingerprint": cfg.fingerprint(),
            "config": cfg.public_dict(),
            "seeds": {"run": cfg.seed, "model": cfg.model.seed, "annotation": cfg.annotation.seed},
            "models": {"generator": cfg.model.generator, "judge": cfg.model.judge},
            "prompts": {
                t: {"version": p.version, "sha256": p.sha256, "ref": p.ref}
                for t, p in prompts.items()
            },
            "packages": {name: _version(name) for name in PACKAGES},
            "funnel": [{"stage": k, "count": v} for k, v in funnel.items()],
            "drop_reasons": drop_reasons,
            "per_category": counts,
            "tokens": token_usage(cache, keys_by_stage),
        }
        card = render_card(cfg, manifest, counts)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        manifest["files"] = {
            str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()
        }
        (tmp / "manifest.json").write_text(
            json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"
