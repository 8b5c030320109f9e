"""Stage 6 — annotation: a verdict per kept pair from imported human labels.

With no labels imported yet every kept pair is `unlabelled`; the release stage lets those
through unless `annotation.required` is set, in which case only `confirmed` pairs are released.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import RunConfig
from pipeline.records import AnnotationRecord, FilterRecord
from pipeline.store import StageFile

STAGE = "annotation"


def run(cfg: RunConfig, run_dir: Path, filtered: list[FilterRecord]) -> list[AnnotationRecord]:
    records = [
        AnnotationRecord(pair_id=r.pair.pair_id, verdict="unlabelled")
        for r in sorted(filtered, key=lambda r: r.pair.pair_id)
        if r.kept
    ]
    StageFile(run_dir, STAGE, AnnotationRecord).write_all(records)
    return records


def releasable(cfg: RunConfig, record: AnnotationRecord) -> bool:
    return record.verdict == "confirmed" or (
        not cfg.annotation.required and record.verdict == "unlabelled"
    )
