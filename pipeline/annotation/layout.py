"""Where annotation files live in a run, and reading them back.

outputs/<run>/annotation/batches/   what annotators get (no key, nothing says chosen/rejected)
outputs/<run>/annotation/private/   key.json: the un-blinding key; never hand it out
outputs/<run>/annotation/labels.jsonl   every imported label, un-blinded, append-only
"""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import PrbError
from pipeline.records import AnnotationKey, AnnotationLabel
from pipeline.store import StageFile

PREFERENCES = ("A_much_better", "A_slightly_better", "tie", "B_slightly_better", "B_much_better")
SCORES = ("correct_a", "relevant_a", "helpful_a", "correct_b", "relevant_b", "helpful_b")
LABEL_FIELDS = ("preference", *SCORES, "reason")
CSV_COLUMNS = ("export_id", "batch_id", "item_id", "annotator_id", *LABEL_FIELDS, "labelled_at")
CONTENT = ("profile", "question", "answer_a", "answer_b")


class AnnotationError(PrbError, ValueError):
    """Bad annotation input or state; the message names the file and the item."""


def annotation_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "annotation"


def batches_dir(run_dir: Path) -> Path:
    return annotation_dir(run_dir) / "batches"


def key_path(run_dir: Path) -> Path:
    return annotation_dir(run_dir) / "private" / "key.json"


def labels_path(run_dir: Path) -> Path:
    return annotation_dir(run_dir) / "labels.jsonl"


def labels_lock(run_dir: Path):
    """Held while labels.jsonl is read, checked and rewritten: imports run one at a time, so two
    at once cannot both read the old file and each write it back without the other's labels."""
    from filelock import FileLock

    annotation_dir(run_dir).mkdir(parents=True, exist_ok=True)
    return FileLock(annotation_dir(run_dir) / ".labels.lock")


def labels_file(run_dir: Path) -> StageFile:
    return StageFile(annotation_dir(run_dir), "labels", AnnotationLabel)


def load_key(run_dir: Path) -> AnnotationKey | None:
    path = key_path(run_dir)
    if not path.exists():
        return None
    try:
        return AnnotationKey.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise AnnotationError(f"{path}: not a valid annotation key: {e}") from None


def load_labels(run_dir: Path) -> list[AnnotationLabel]:
    return list(labels_file(run_dir).read())
