"""`prb annotate import`: read labelled files, check all of them, then un-blind and append.

Every file is read and every label checked before anything is written: one bad label anywhere
(an item of another run or export, unknown item, wrong batch, an annotator not assigned to the
batch, duplicate, missing or invalid field) rejects the whole import with a message naming the
file, item and annotator, and labels.jsonl stays as it was. Imports hold a lock on the run's
labels, so imports started at the same time add up instead of overwriting each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pipeline.annotation.formats import RawLabel, parse_values, read_labels
from pipeline.annotation.layout import (
    AnnotationError,
    key_path,
    labels_file,
    labels_lock,
    load_key,
)
from pipeline.records import AnnotationKey, AnnotationKeyItem, AnnotationLabel

MAX_SHOWN = 20  # problems listed in the error; the count says how many there were


@dataclass
class ImportSummary:
    labels: int
    by_file: dict[str, tuple[str, int]]  # file -> (format, labels)


def unblind(
    item: AnnotationKeyItem, raw: RawLabel, typed: dict, source: str, now: str
) -> AnnotationLabel:
    pref = typed["preference"]
    shown_side, _, strength = pref.partition("_")  # "A_much_better" -> A, much
    a, b = (item.a_is, "rejected" if item.a_is == "chosen" else "chosen")
    side = "tie" if pref == "tie" else (a if shown_side == "A" else b)
    scores = {
        letter: {k: typed[f"{k}_{letter}"] for k in ("correct", "relevant", "helpful")}
        for letter in ("a", "b")
    }
    return AnnotationLabel(
        item_id=item.item_id,
        batch_id=item.batch_id,
        pair_id=item.pair_id,
        kind=item.kind,
        annotator_id=raw.annotator_id,
        labelled_at=raw.labelled_at,
        imported_at=now,
        source=source,
        preference=pref,
        side=side,
        strength="none" if pref == "tie" else strength.removesuffix("_better"),
        scores_chosen=scores["a" if a == "chosen" else "b"],
        scores_rejected=scores["a" if a == "rejected" else "b"],
        reason=typed["reason"],
    )


def foreign(key: AnnotationKey, path: Path, raws) -> str | None:
    """A file (or part of one) exported by another run or another export of this run: refused
    whole, naming its first foreign item, before any of its labels is looked at."""
    other = [r for r in raws if r.export_id and r.export_id != key.export_id]
    if not other:
        return None
    first = other[0]
    more = f" (and {len(other) - 1} more)" if len(other) > 1 else ""
    return (
        f"{path}: {first.where}: item {first.item_id} comes from export {first.export_id}{more}, "
        f"not from this run's export {key.export_id or '(unnamed)'} of run {key.run_id!r}: "
        "import each file into the run it was exported from"
    )


def import_labels(run_dir: Path, files: list[Path]) -> ImportSummary:
    with labels_lock(run_dir):
        return _import(run_dir, files)


def _import(run_dir: Path, files: list[Path]) -> ImportSummary:
    key = load_key(run_dir)
    if key is None:
        raise AnnotationError(f"{key_path(run_dir)}: no export for this run; export first")
    items = {i.item_id: i for i in key.items}
    store = labels_file(run_dir)
    before = list(store.read())
    seen = {(lab.item_id, lab.annotator_id): "an earlier import" for lab in before}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    problems: list[str] = []
    ready: list[AnnotationLabel] = []
    by_file: dict[str, tuple[str, int]] = {}
    for path in map(Path, files):
        fmt, raws = read_labels(path)
        by_file[str(path)] = (fmt, len(raws))
        if (elsewhere := foreign(key, path, raws)) is not None:
            raise AnnotationError(f"nothing imported: {elsewhere}")
        for raw in raws:
            who = f"{raw.where}: item {raw.item_id or '?'} (annotator {raw.annotator_id or '?'})"
            item = items.get(raw.item_id or "")
            if raw.item_id is None:
                problems.append(f"{raw.where}: missing item_id")
                continue
            if item is None:
                problems.append(f"{who}: unknown item id, not in this run's export")
                continue
            if raw.batch_id is not None and raw.batch_id != item.batch_id:
                problems.append(
                    f"{who}: label for the wrong batch: file says {raw.batch_id}, "
                    f"the item belongs to {item.batch_id}"
                )
                continue
            if not raw.annotator_id:
                problems.append(f"{who}: missing annotator id")
                continue
            assigned = key.assignments.get(item.batch_id, [])
            if raw.annotator_id not in assigned:
                problems.append(
                    f"{who}: annotator {raw.annotator_id!r} is not assigned to {item.batch_id} "
                    f"(assigned: {', '.join(assigned)})"
                )
                continue
            if (raw.item_id, raw.annotator_id) in seen:
                problems.append(
                    f"{who}: duplicate label, already given in "
                    f"{seen[(raw.item_id, raw.annotator_id)]}"
                )
                continue
            seen[(raw.item_id, raw.annotator_id)] = raw.where
            typed, bad = parse_values(raw.values)
            problems += [f"{who}: {p}" for p in bad]
            if not bad:
                ready.append(unblind(item, raw, typed, f"{path.name} ({fmt})", now))
    if problems:
        shown = "\n  ".join(problems[:MAX_SHOWN])
        more = f"\n  ... and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
        raise AnnotationError(
            f"nothing imported: {len(problems)} problem(s) in the labelled files\n  {shown}{more}"
        )
    store.write_all([*before, *ready])  # atomic: a crash leaves the old file whole
    return ImportSummary(labels=len(ready), by_file=by_file)
