"""The released split's one schema: its columns, their `datasets` features and card text, where
its files lie, and how a filtered pair becomes a row. Used by the release stage, the card,
`prb release verify|diff`, `prb eval` and the tests; nothing else lists columns.

The first eight columns follow the public Personalized RewardBench release; the rest record how
each row was made. The checks (pipeline/checks/) add their own: `quality` and the sub-fields of
`pair_checks`, in the checks' order.
"""

from __future__ import annotations

from pathlib import Path

import datasets

from pipeline.checks import CHECKS
from pipeline.columns import AFTER_CHECKS, BEFORE_CHECKS
from pipeline.records import AnnotationRecord, FilterRecord
from pipeline.store import sha256_file

PUBLIC = (
    "id",
    "question",
    "profile",
    "rubric_aspects",
    "narrative",
    "category",
    "chosen",
    "rejected",
)
PARQUET_GLOB = "*/test-*.parquet"


def _feature(spec):
    """dtype names as `datasets` features: "string", {field: spec}, [element spec]."""
    if isinstance(spec, str):
        return datasets.Value(spec)
    if isinstance(spec, list):
        return datasets.List(_feature(spec[0]))
    return {k: _feature(v) for k, v in spec.items()}


def _columns() -> dict[str, tuple[object, str]]:
    cols = dict(BEFORE_CHECKS)
    for c in CHECKS:
        cols |= {name: (dtype, doc) for name, (dtype, doc, _) in c.report.columns.items()}
    cols["pair_checks"] = (
        {k: v for c in CHECKS for k, v in c.features.items()},
        ", ".join(c.report.about for c in CHECKS if c.report.about),
    )
    return cols | AFTER_CHECKS


COLUMNS = _columns()
FEATURES = datasets.Features({name: _feature(dtype) for name, (dtype, _) in COLUMNS.items()})
COLUMN_DOCS = {name: doc for name, (_, doc) in COLUMNS.items()}
datasets.disable_progress_bars()


def to_row(f: FilterRecord, ann: AnnotationRecord, profiles: dict[str, list[dict]]) -> dict:
    """A kept pair as a release row (every check ran on it); `profiles`: persona id -> profile,
    for the users the rejected answers were written for."""
    p = f.pair
    row = {
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
        "rejected_for": p.rejected_for,
        "rejected_for_profile": profiles.get(p.rejected_for, []) if p.rejected_for else [],
        "differences": [d.model_dump() for d in p.differences],
    }
    results = {c.name: c.read(f) for c in CHECKS}
    for c in CHECKS:  # a check that did not run (no judge qualified) leaves its columns null
        r = results[c.name]
        columns = c.report.columns.items()
        row |= {name: None if r is None else value(r) for name, (_, _, value) in columns}
    row["pair_checks"] = {  # a check switched off (counterfactual by default) leaves nulls
        k: v
        for c in CHECKS
        for k, v in (
            c.released(results[c.name])
            if results[c.name] is not None
            else dict.fromkeys(c.features)
        ).items()
    }
    return row | {
        "would_drop": f.would_drop,
        "annotation": ann.model_dump(exclude={"pair_id"}),
        "generator_model": p.generator_model,
        "judge_model": f.judge_model,
        "prompt_versions": [{"task": k, "ref": v} for k, v in sorted(p.prompt_versions.items())],
    }


# --- the folder -------------------------------------------------------------------------------


def data_path(category: str) -> str:
    return f"{category}/test-00000-of-00001.parquet"


def jsonl_path(category: str) -> str:
    """The same rows as JSON Lines, for readers without `datasets`; the card's configs only
    name the Parquet files, so `load_dataset` never sees these."""
    return f"{category}/test.jsonl"


def file_checksums(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder` except the manifest that lists them."""
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
