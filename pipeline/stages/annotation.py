"""Stage 6 — annotation: a verdict per kept pair from the human labels imported so far.

`prb annotate export` writes blinded batches, `prb annotate import` reads labels back into
`annotation/labels.jsonl` (pipeline/annotation/), and this stage turns them into verdicts on every
build. With no labels a kept pair is `unlabelled`. With `annotation.required` only `confirmed`
pairs are released; without it every pair is released except those humans `refuted`.
"""

from __future__ import annotations

from collections import Counter

from pipeline.annotation.layout import load_key, load_labels
from pipeline.annotation.stats import verdicts
from pipeline.annotation.verdicts import releasable
from pipeline.records import AnnotationRecord, FilterRecord
from pipeline.stages.base import RunContext, Stage, StageReport
from pipeline.store import Records


async def run(ctx: RunContext, filtered: Records) -> StageReport:
    kept = sorted(r.pair.pair_id for r in filtered if r.kept)
    key = load_key(ctx.run_dir)
    labels = load_labels(ctx.run_dir) if key else []
    found = verdicts(ctx.cfg.annotation, key, labels) if key else {}
    records = [
        found.get(pid) or AnnotationRecord(pair_id=pid, verdict="unlabelled") for pid in kept
    ]
    STAGE.file(ctx.run_dir).write_all(records)
    passed = sum(releasable(ctx.cfg, r) for r in records)
    lost = Counter(r.verdict for r in records if not releasable(ctx.cfg, r))
    return StageReport(records, passed, lost=lost)


STAGE = Stage(
    name="annotation",
    reads=(FilterRecord,),
    input_id=lambda f: f.pair.pair_id,
    output=AnnotationRecord,
    output_id=lambda a: a.pair_id,
    run=run,
    funnel="annotation_passed",
    about="pairs whose human verdict allows release (human labels {required})",
    empty_hint="annotation.required is true and no kept pair has a confirmed human verdict: "
    "`prb annotate export {run_id}`, import the labels, then rebuild (or set "
    "annotation.required: false)",
)
