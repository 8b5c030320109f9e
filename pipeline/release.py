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
import tempfile
from collections import Counter
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import datasets
import pyarrow.parquet as pq
from datasets.arrow_writer import ParquetWriter

from pipeline import cost
from pipeline.annotation import manifest_block, releasable
from pipeline.cache import ResponseCache
from pipeline.card import render_card
from pipeline.config import RunConfig
from pipeline.errors import DiskFullError, is_disk_full
from pipeline.prompts import BUILD_TASKS, load_prompt
from pipeline.records import AnnotationRecord, FilterRecord
from pipeline.store import Records

FORMAT_VERSION = 1
ROWS_PER_BATCH = 1000  # rows per Arrow batch and Parquet row group: bounds the writer's memory
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


def write_jsonl(parquet: Path, path: Path) -> None:
    """The Parquet file's rows as JSON Lines, batch by batch: key order follows FEATURES and
    Python's float repr round-trips, so the text is as stable as the Parquet."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for batch in pq.ParquetFile(parquet).iter_batches(batch_size=ROWS_PER_BATCH):
            for row in batch.to_pylist():
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_category(rows: Iterable[dict], folder: Path, category: str) -> tuple[int, int]:
    """One category's rows (already in order) streamed into its Parquet file through
    `datasets`' own ParquetWriter (Hugging Face features in the schema metadata), then the
    JSONL copy; returns (rows, in-memory Arrow bytes)."""
    path = folder / data_path(category)
    path.parent.mkdir(parents=True)
    with ParquetWriter(
        path=str(path), features=FEATURES, writer_batch_size=ROWS_PER_BATCH
    ) as writer:
        for row in rows:
            writer.write(row)
        n, num_bytes = writer.finalize()
    write_jsonl(path, folder / jsonl_path(category))
    return n, num_bytes


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


class ReleaseStats:
    """Figures about the released rows that the card reports (all derived, all deterministic),
    counted row by row as the rows stream past."""

    def __init__(self) -> None:
        self.n = 0
        self.words = {"chosen": 0, "rejected": 0}
        self.strategies: Counter[str] = Counter()
        self.blind: Counter[str] = Counter()
        self.verdicts: Counter[str] = Counter()

    def add(self, row: dict) -> dict:
        self.n += 1
        for col in self.words:
            self.words[col] += len(row[col].split())
        self.strategies[row["rejected_strategy"]] += 1
        self.blind[row["pair_checks"]["blind_picked"]] += 1
        self.verdicts[row["annotation"]["verdict"]] += 1
        return row

    def summary(self) -> dict:
        return {
            "rejected_strategies": dict(sorted(self.strategies.items())),
            "mean_words": {
                c: round(w / self.n, 1) if self.n else 0.0 for c, w in self.words.items()
            },
            "blind_picked": dict(sorted(self.blind.items())),
            "verdicts_released": dict(sorted(self.verdicts.items())),
        }


def run(
    cfg: RunConfig,
    run_dir: Path,
    filtered: Records,
    annotations: list[AnnotationRecord],
    funnel: dict[str, int],
    drop_reasons: dict[str, int],
    cache: ResponseCache,
    keys_by_stage: dict[str, list[str]],
) -> Path:
    verdicts = {a.pair_id: a for a in annotations}
    # pass 1 orders the releasable pairs by (category, id) and keeps only their file offsets;
    # pass 2 reads them back one by one into the writer: no stage is held in memory
    order: dict[str, list[tuple[str, int]]] = {c: [] for c in cfg.personas.categories}
    for offset, f in filtered.items():
        pid = f.pair.pair_id
        if f.kept and pid in verdicts and releasable(cfg, verdicts[pid]):
            order.setdefault(f.pair.task.category, []).append((pid, offset))
    stats = ReleaseStats()
    final = run_dir / "release"
    tmp = Path(tempfile.mkdtemp(dir=run_dir, prefix=".release-"))
    tmp.chmod(0o755)  # mkdtemp makes 0700; the release is meant to be shared
    try:
        counts: dict[str, int] = {}
        arrow_bytes: dict[str, int] = {}  # the Hub's `num_bytes`: in-memory Arrow size
        for category in cfg.personas.categories:
            if not order[category]:
                continue
            offsets = [offset for _, offset in sorted(order[category])]
            rows = (
                stats.add(to_row(f, verdicts[f.pair.pair_id]))
                for f in filtered.file.read_at(offsets)
            )
            counts[category], arrow_bytes[category] = write_category(rows, tmp, category)
        funnel = {**funnel, "released": stats.n}
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
            "stats": stats.summary(),
            "annotation": manifest_block(cfg, run_dir, annotations),
            "tokens": token_usage(cache, keys_by_stage),
            "cost": cost.summary(cfg, cache, keys_by_stage, stats.n),  # priced: pipeline/cost.py
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
    except OSError as e:  # Arrow's write errors often carry no file name: name the folder
        if is_disk_full(e):
            raise DiskFullError(tmp) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"
