"""Stage 7 — release: one Parquet (plus a JSONL copy) per category config, split `test`, a
dataset card and a manifest. Same inputs and cache give byte-identical files: rows are sorted by
id and nothing time-, host- or endpoint-dependent goes into them. The only run-dependent field is
`run_id` in manifest.json, so two run ids over the same inputs differ in that one field and in
nothing else. The folder is built aside and renamed into place. A build that would release no
pair stops instead (exit 5), saying where every record was lost.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq
from datasets.arrow_writer import ParquetWriter

from pipeline import cost, probes, qualification
from pipeline.annotation.verdicts import manifest_block, releasable
from pipeline.checks import CHECKS
from pipeline.errors import DiskFullError, NothingReleased, is_disk_full
from pipeline.llm.cache import ResponseCache
from pipeline.llm.prompts import load_prompt
from pipeline.meter import timed
from pipeline.records import AnnotationRecord, FilterRecord, Persona
from pipeline.release import figures
from pipeline.release import manifest as mf
from pipeline.release.card import render_card
from pipeline.release.schema import FEATURES, data_path, file_checksums, jsonl_path, to_row
from pipeline.sim import FINGERPRINT as SIMULATOR
from pipeline.stages.base import RunContext, Stage, StageReport, prompt_tasks, roles
from pipeline.stats import word_count
from pipeline.store import Records, current_drops

ROWS_PER_BATCH = 1000  # rows per Arrow batch and Parquet row group: bounds the writer's memory
# the card's probes read at most this many released pairs (a seeded sample): their memory
# and time stay bounded, and at n = 5,000 a Wilson interval is +-0.014 wide
PROBE_SAMPLE = 5000


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


def answers_used(
    cache: ResponseCache, keys_by_stage: dict[str, list[str]]
) -> tuple[dict[str, dict], list[str]]:
    """Tokens of the answers the run used, per stage, and what answered them, read from the
    cache in one pass (so a resumed or repeated run reports the same figures as an
    uninterrupted one). What answered: `prb-simulator` (it signs every answer) or `endpoint`."""
    tokens, seen = {}, set()
    for stage, keys in keys_by_stage.items():
        prompt = completion = 0
        for key in keys:
            entry = cache.get(key)
            if entry:
                prompt += entry[1].get("prompt_tokens", 0) or 0
                completion += entry[1].get("completion_tokens", 0) or 0
                seen.add(entry[1].get("served_by", "endpoint"))
        tokens[stage] = {
            "calls": len(keys),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
        }
    return tokens, sorted(seen)


# what the probes and the checks' figures read of a released row
PROBED = (
    "id",
    "question",
    "chosen",
    "rejected",
    "profile",
    "persona_id",
    "rejected_for",
    "rejected_for_profile",
    "category",
    "pair_checks",
    *(name for c in CHECKS for name in c.report.columns),
)


def validity(rows: list[dict], sampled: dict | None = None) -> dict:
    """What the card and the manifest say separates the pairs: the model-free probes on the
    released rows, family by family (leakage, floors), with n and intervals; and the build's
    own judges on those rows (`judges`), by the figures their checks declare."""
    found = probes.summary(probes.run_all(rows)) if len(rows) >= 2 else None
    if found is None:
        return {}
    keep = ("name", "value", "low", "high", "n", "leak", "kind")
    return {
        "verdict": found["verdict"],
        "pairs": found["pairs"],
        "min_pairs": found["min_pairs"],
        "threshold": found["threshold"],
        "easy": found["easy"],
        "families": [
            {
                "family": f["family"],
                "title": f["title"],
                "rule": f["rule"],
                "flag": f["flag"],
                "probes": [{k: p[k] for k in keep} for p in f["probes"]],
            }
            for f in found["families"]
        ],
        "judges": judged(rows),
        **({"sample": sampled} if sampled else {}),
    }


def judged(rows: list[dict]) -> list[dict]:
    """The judge checks' figures over the released rows (pairs the filters kept: a selected
    sample, unlike `prb audit --judge`, which asks its judges about any release)."""
    judges = {f.key for c, f in figures.declared() if c.cost}
    keep = ("key", "label", "summary", "text", "value", "low", "high", "pairs", "n", "warn")
    return [
        {k: s.get(k) for k in keep}
        for s in figures.summarize_all([figures.of_row(r) for r in rows])
        if s["key"] in judges
    ]


class ReleaseStats:
    """Figures about the released rows that the card reports (all derived, all deterministic),
    counted row by row as the rows stream past. The probes read at most `sample` rows: the
    ones whose sha256 of seed and pair id is smallest (a seeded sample that does not depend
    on the order rows arrive in), kept in a heap, so the stage's memory does not grow with
    the release; below `sample` they read every row."""

    def __init__(self, sample: int = PROBE_SAMPLE, seed: int = 0) -> None:
        self.n = 0
        self.words = {"chosen": 0, "rejected": 0}
        self.strategies: Counter[str] = Counter()
        self.blind: Counter[str] = Counter()
        self.verdicts: Counter[str] = Counter()
        self.sample, self.seed = sample, seed
        self._heap: list[tuple[int, int, dict]] = []  # (-hash, arrival, probed row)

    def add(self, row: dict) -> dict:
        key = hashlib.sha256(f"{self.seed}:{row['id']}".encode()).digest()[:8]
        item = (-int.from_bytes(key, "big"), self.n, {k: row.get(k) for k in PROBED})
        if len(self._heap) < self.sample:
            heapq.heappush(self._heap, item)
        elif item[0] > self._heap[0][0]:  # a smaller hash than the largest one kept
            heapq.heapreplace(self._heap, item)
        self.n += 1
        for col in self.words:
            self.words[col] += word_count(row[col])
        self.strategies[row["rejected_strategy"]] += 1
        self.blind[row["pair_checks"]["blind_picked"]] += 1
        self.verdicts[row["annotation"]["verdict"]] += 1
        return row

    @property
    def probed(self) -> list[dict]:
        """What the probes read: the sampled rows in the order they arrived."""
        return [row for _, _, row in sorted(self._heap, key=lambda item: item[1])]

    def sampled(self) -> dict | None:
        """The sample, as the card and manifest state it; None when the probes read all."""
        if self.n <= self.sample:
            return None
        return {"pairs": self.sample, "of": self.n, "seed": self.seed, "by": "sha256(seed:id)"}

    def summary(self) -> dict:
        return {
            "rejected_strategies": dict(sorted(self.strategies.items())),
            "mean_words": {
                c: round(w / self.n, 1) if self.n else 0.0 for c, w in self.words.items()
            },
            "blind_picked": dict(sorted(self.blind.items())),
            "verdicts_released": dict(sorted(self.verdicts.items())),
        }


HINTS = {  # what to do about the usual cause of a stage losing every record
    "endpoint_error": "is the endpoint up? Rerun the same command to resume once it is",
    "unparseable": "the model's answers did not parse: check the model and its output mode",
    "cut_off": "the answers ran past max_tokens: the model writes more than the task allows "
    "(or the endpoint cuts it off)",
    "bad_request": "the endpoint rejected the requests: check the model name and its limits",
    "content_filter": "the provider's content filter refused every answer",
    "ungrounded": "no plan cited the profile: check the planner model and prompt",
    "generic": "every plan's aspects were ones any user would get: give users stated "
    "preferences (rubrics.source: stated) or use a stronger planner model",
}


def why_nothing(ctx: RunContext, funnel: dict, lost_by: dict, drops) -> str:
    """One line: the stage where the last records were lost, the main reason with an example,
    and what to do."""
    rows = [(s, funnel[s.funnel]) for s in ctx.stages if s.funnel in funnel]
    for (_, n_before), (stage, n) in zip(rows, rows[1:], strict=False):
        if n_before and not n:
            lost = lost_by.get(stage.funnel) or Counter()
            top = lost.most_common(1)[0][0] if lost else ""
            shown = ", ".join(f"{r} {k}" for r, k in lost.most_common(3))
            example = next(
                (d.detail for d in drops if d.stage == stage.name and d.reason == top),
                ctx.examples.get(top, ""),
            )
            hint = next((h for k, h in HINTS.items() if top.endswith(k)), None)
            hint = hint or stage.empty_hint.format(run_id=ctx.cfg.run_id) or "see `prb audit`"
            detail = f" ({shown}{'; e.g. ' + example if example else ''})" if lost else ""
            return (
                f"0 pairs released: the {stage.name} stage passed on none of its {n_before} "
                f"records{detail}: {hint}"
            )
    return "0 pairs released: the persona source gave no user: check `personas:` in the config"


async def run(ctx: RunContext, annotations: list[AnnotationRecord]) -> StageReport:
    cfg, run_dir = ctx.cfg, ctx.run_dir
    filtered: Records = ctx.read(FilterRecord)
    drops = current_drops(run_dir, ctx.produced)
    funnel, lost = ctx.funnel, ctx.lost
    for s in ctx.stages:  # the records each stage dropped (the filters count their own)
        if s.funnel not in lost and any(d.stage == s.name for d in drops):
            lost[s.funnel] = Counter(d.reason for d in drops if d.stage == s.name)
    reasons = Counter(d.reason for d in drops) + lost.get("filters_kept", Counter())
    if not funnel.get("annotation_passed"):  # a release of nothing is no release
        raise NothingReleased(why_nothing(ctx, funnel, lost, drops))
    verdicts = {a.pair_id: a for a in annotations}
    # pass 1 orders the releasable pairs by (category, id) and keeps only their file offsets;
    # pass 2 reads them back one by one into the writer: no stage is held in memory
    order: dict[str, list[tuple[str, int]]] = {}
    written_for: set[str] = set()  # the users rejected answers were written for
    for offset, f in filtered.items():
        pid = f.pair.pair_id
        if f.kept and pid in verdicts and releasable(cfg, verdicts[pid]):
            order.setdefault(f.pair.task.category, []).append((pid, offset))
            if f.pair.rejected_for:
                written_for.add(f.pair.rejected_for)
    profiles = {
        p.persona_id: [i.model_dump() for i in p.profile]
        for p in ctx.read(Persona)
        if p.persona_id in written_for
    }
    stats = ReleaseStats(PROBE_SAMPLE, cfg.seed)
    final = run_dir / "release"
    tmp = Path(tempfile.mkdtemp(dir=run_dir, prefix=".release-"))
    tmp.chmod(0o755)  # mkdtemp makes 0700; the release is meant to be shared
    try:
        counts: dict[str, int] = {}
        arrow_bytes: dict[str, int] = {}  # the Hub's `num_bytes`: in-memory Arrow size
        for category in cfg.personas.categories or sorted(order):
            if not order.get(category):
                continue
            offsets = [offset for _, offset in sorted(order[category])]
            rows = (
                stats.add(to_row(f, verdicts[f.pair.pair_id], profiles))
                for f in filtered.file.read_at(offsets)
            )
            counts[category], arrow_bytes[category] = write_category(rows, tmp, category)
        funnel[STAGE.funnel] = stats.n
        config = cfg.recorded()
        tokens, answered = answers_used(ctx.cache, ctx.keys)
        with timed(ctx.seconds, "release: probes"):
            found = validity(stats.probed, stats.sampled())
        manifest = mf.Manifest(
            format_version=mf.FORMAT_VERSION,
            name=cfg.release.name,
            run_id=cfg.run_id,
            simulated=cfg.simulated or SIMULATOR in answered,
            served_by=answered,
            license=cfg.release.license,
            config_fingerprint=hashlib.sha256(
                json.dumps(config, sort_keys=True).encode()
            ).hexdigest()[:16],
            config=config,
            seeds={"run": cfg.seed, "model": cfg.model.seed, "annotation": cfg.annotation.seed},
            models={"generator": cfg.model.generator, "judge": cfg.model.judge},
            prompts={
                t: {"version": p.version, "sha256": p.sha256, "ref": p.ref}
                for t, p in sorted((t, load_prompt(t)) for t in prompt_tasks(ctx.stages, cfg))
            },
            packages=mf.versions(),
            funnel=mf.funnel(funnel),
            drop_reasons=dict(sorted(reasons.items())),
            per_category=counts,
            num_bytes=arrow_bytes,
            stats=stats.summary(),
            validity=found,
            judge_qualification={
                k: v for k, v in (qualification.read(run_dir) or {}).items() if k != "keys"
            },
            annotation=manifest_block(cfg, run_dir, annotations),
            tokens=tokens,
            cost=cost.summary(cfg, ctx.cache, ctx.keys, stats.n, roles(ctx.stages)),
        )
        about = {s.funnel: s.about for s in ctx.stages}
        (tmp / "README.md").write_text(render_card(manifest, about), encoding="utf-8")
        manifest.files = file_checksums(tmp)
        (tmp / "manifest.json").write_text(manifest.dumps(), encoding="utf-8")
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
    return StageReport(final, stats.n)


STAGE = Stage(
    name="release",
    output=None,  # it writes a release folder, not a stage file
    reads=(AnnotationRecord, FilterRecord, Persona),
    run=run,
    funnel="released",
    about="rows in this release",
)
