"""Stage 7 — release: one Parquet (plus a JSONL copy) per category config, split `test`, a
dataset card and a manifest. Same inputs and cache give byte-identical files: rows are sorted by
id and nothing time-, host- or endpoint-dependent goes into them. The only run-dependent field is
`run_id` in manifest.json, so two run ids over the same inputs differ in that one field and in
nothing else. The folder is built aside and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import tempfile
from collections import Counter
from importlib import metadata
from pathlib import Path

import datasets

from pipeline import cost
from pipeline.annotation import manifest_block, releasable
from pipeline.cache import ResponseCache
from pipeline.card import render_card
from pipeline.config import RunConfig
from pipeline.prompts import BUILD_TASKS, load_prompt
from pipeline.records import AnnotationRecord, FilterRecord

FORMAT_VERSION = 1
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
PACKAGES = (
    "prb",
    "openai",
    "datasets",
    "huggingface_hub",
    "pyarrow",
    "pandas",
    "prefect",
    "pydantic",
    "tenacity",
)


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


def file_checksums(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder` except the manifest that lists them."""
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def data_path(category: str) -> str:
    return f"{category}/test-00000-of-00001.parquet"


def jsonl_path(category: str) -> str:
    """The same rows as JSON Lines, for readers without `datasets`; the card's configs only
    name the Parquet files, so `load_dataset` never sees these."""
    return f"{category}/test.jsonl"


def write_jsonl(ds: datasets.Dataset, path: Path) -> None:
    # key order follows FEATURES; Python's float repr round-trips, so the text is stable
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in ds.to_list():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


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


def release_stats(rows: list[dict]) -> dict:
    """Figures about the released rows that the card reports (all derived, all deterministic)."""

    def mean_words(col: str) -> float:
        return round(statistics.fmean(len(r[col].split()) for r in rows), 1) if rows else 0.0

    return {
        "rejected_strategies": dict(sorted(Counter(r["rejected_strategy"] for r in rows).items())),
        "mean_words": {"chosen": mean_words("chosen"), "rejected": mean_words("rejected")},
        "blind_picked": dict(
            sorted(Counter(r["pair_checks"]["blind_picked"] for r in rows).items())
        ),
        "verdicts_released": dict(
            sorted(Counter(r["annotation"]["verdict"] for r in rows).items())
        ),
    }


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
    tmp.chmod(0o755)  # mkdtemp makes 0700; the release is meant to be shared
    try:
        counts: dict[str, int] = {}
        arrow_bytes: dict[str, int] = {}  # the Hub's `num_bytes`: in-memory Arrow size
        for category in cfg.personas.categories:
            subset = [r for r in rows if r["category"] == category]
            if not subset:
                continue
            counts[category] = len(subset)
            path = tmp / data_path(category)
            path.parent.mkdir(parents=True)
            ds = datasets.Dataset.from_list(subset, features=FEATURES)
            ds.to_parquet(str(path))
            arrow_bytes[category] = ds.data.nbytes
            write_jsonl(ds, tmp / jsonl_path(category))
        config = cfg.recorded()
        manifest = {
            "format_version": FORMAT_VERSION,
            "name": cfg.release.name,
            "run_id": cfg.run_id,
            "simulated": cfg.simulated,
            "license": cfg.release.license,
            "config_fingerprint": hashlib.sha256(
                json.dumps(config, sort_keys=True).encode()
            ).hexdigest()[:16],
            "config": config,
            "seeds": {"run": cfg.seed, "model": cfg.model.seed, "annotation": cfg.annotation.seed},
            "models": {"generator": cfg.model.generator, "judge": cfg.model.judge},
            "prompts": {
                t: {"version": p.version, "sha256": p.sha256, "ref": p.ref}
                for t, p in sorted((t, load_prompt(t)) for t in BUILD_TASKS)
            },
            "packages": {name: _version(name) for name in PACKAGES},
            "funnel": [{"stage": k, "count": v} for k, v in funnel.items()],
            "drop_reasons": drop_reasons,
            "per_category": counts,
            "num_bytes": arrow_bytes,
            "stats": release_stats(rows),
            "annotation": manifest_block(cfg, run_dir, annotations),
            "tokens": token_usage(cache, keys_by_stage),
            "cost": cost.summary(cfg, cache, keys_by_stage, len(rows)),  # priced: pipeline/cost.py
        }
        (tmp / "README.md").write_text(render_card(manifest, FEATURES), encoding="utf-8")
        manifest["files"] = file_checksums(tmp)
        (tmp / "manifest.json").write_text(
            json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
            encoding="utf-8",
        )
        # the old release moves aside before the new one moves in: a crash in between leaves
        # one complete release on disk, never a half-written one
        old = run_dir / ".release-old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"
