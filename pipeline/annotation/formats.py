"""Readers for labelled files: Label Studio JSON export, Argilla records export, our CSV.

Each reader turns a file into `RawLabel`s (still blinded, still unchecked) and says where each
came from, so that validation can name the file, item and annotator of every problem.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import csvfile
from pipeline.annotation.layout import (
    CSV_COLUMNS,
    LABEL_FIELDS,
    PREFERENCES,
    SCORES,
    AnnotationError,
)


@dataclass
class RawLabel:
    where: str  # "file.csv row 3", "export.json task 12 annotation 4"
    item_id: str | None
    batch_id: str | None  # as the file states it, if the format carries it
    annotator_id: str | None
    export_id: str | None = None  # the export the file says the item came from
    values: dict[str, object] = field(default_factory=dict)  # LABEL_FIELDS that were present
    labelled_at: str | None = None


def read_labels(path: Path) -> tuple[str, list[RawLabel]]:
    """(format name, labels) for one file; the format is recognised from its content."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")  # no newline translation: a cell keeps CRLF
    except (OSError, UnicodeDecodeError) as e:
        raise AnnotationError(f"{path}: cannot read: {e}") from None
    if path.suffix.lower() == ".csv":
        return "csv", read_csv(path, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise AnnotationError(f"{path}: not JSON or CSV: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("records"), list):
        data = data["records"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise AnnotationError(f"{path}: expected a JSON list of tasks or records")
    if any("annotations" in r for r in data):
        return "label_studio", read_label_studio(path, data)
    if any("fields" in r or "responses" in r or _flat_responses(r) for r in data):
        return "argilla", read_argilla(path, data)
    raise AnnotationError(
        f"{path}: neither a Label Studio export (tasks with 'annotations') "
        "nor Argilla records (with 'fields'/'responses')"
    )


def read_csv(path: Path, text: str) -> list[RawLabel]:
    """A CSV parsed as CSV (a cell may hold line breaks), never split into lines first."""
    try:
        names, rows = csvfile.read(text)
        missing = [c for c in CSV_COLUMNS if c not in names]
    except csv.Error as e:
        raise AnnotationError(f"{path}: not a readable CSV: {e}") from None
    if missing:
        raise AnnotationError(f"{path}: missing CSV columns: {', '.join(missing)}")
    out = []
    for n, row in rows:
        # ids and scores are trimmed; a reason is the annotator's text, kept as typed
        values = {
            k: row[k] if k == "reason" else row[k].strip()
            for k in LABEL_FIELDS
            if (row.get(k) or "").strip()
        }
        if not values:
            continue  # a template row nobody has filled in yet
        cell = lambda name, row=row: (row.get(name) or "").strip() or None  # noqa: E731
        out.append(
            RawLabel(
                where=f"{path.name} row {n}",
                item_id=cell("item_id"),
                batch_id=cell("batch_id"),
                annotator_id=cell("annotator_id"),
                export_id=cell("export_id"),
                values=values,
                labelled_at=cell("labelled_at"),
            )
        )
    return out


def _malformed(path: Path, where: str, tool: str):
    """A task or record whose fields have the wrong shape ("result": "nope", "annotations":
    5): one line naming it, never a traceback."""
    return AnnotationError(
        f"{path}: {where} is not as {tool} exports it (a field of the wrong type): export the "
        f"labels again from {tool}, unedited"
    )


def _each(path: Path, items: list[dict], read_one, what: str, tool: str) -> list[RawLabel]:
    """Every item's labels; an item whose fields have the wrong shape is one line naming it."""
    out = []
    for no, item in enumerate(items, start=1):
        try:
            out += read_one(path, no, item)
        except (AttributeError, TypeError, KeyError, IndexError):
            raise _malformed(path, f"{what} {no}", tool) from None
    return out


def read_label_studio(path: Path, tasks: list[dict]) -> list[RawLabel]:
    return _each(path, tasks, _label_studio_task, "task", "Label Studio")


def _label_studio_task(path: Path, t_no: int, task: dict) -> list[RawLabel]:
    out = []
    data = task.get("data") or {}
    for a_no, ann in enumerate(task.get("annotations") or [], start=1):
        if ann.get("was_cancelled"):
            continue  # skipped in the tool: not a label
        values: dict[str, object] = {}
        for r in ann.get("result") or []:
            name, value = r.get("from_name"), r.get("value") or {}
            if "choices" in value and value["choices"]:
                values[name] = value["choices"][0]
            elif "rating" in value:
                values[name] = value["rating"]
            elif "text" in value:
                text = value["text"]
                values[name] = "\n".join(text) if isinstance(text, list) else text
        who = ann.get("completed_by")
        if isinstance(who, dict):
            who = who.get("email") or who.get("id")
        out.append(
            RawLabel(
                where=f"{path.name} task {task.get('id', t_no)} annotation {ann.get('id', a_no)}",
                item_id=data.get("item_id"),
                batch_id=data.get("batch_id"),
                annotator_id=None if who is None else str(who),
                export_id=data.get("export_id"),
                values=values,
                labelled_at=ann.get("updated_at") or ann.get("created_at"),
            )
        )
    return out


def _flat_responses(record: dict) -> bool:
    return any(k.endswith(".responses") for k in record)


def _nested(record: dict) -> dict[str, list[dict]]:
    """Responses as {question: [{"value", "user_id", ...}]}, from either export layout:
    Record.to_dict (nested) or to_list(flatten=True)/to_datasets (`q.responses`, `.users`)."""
    if "responses" in record:
        return record.get("responses") or {}
    nested: dict[str, list[dict]] = {}
    for key, values in record.items():
        if key.endswith(".responses") and values:
            q = key.removesuffix(".responses")
            users = record.get(f"{q}.responses.users") or [None] * len(values)
            status = record.get(f"{q}.responses.status") or [None] * len(values)
            nested[q] = [
                {"value": v, "user_id": u, "status": s}
                for v, u, s in zip(values, users, status, strict=False)
            ]
    return nested


def read_argilla(path: Path, records: list[dict]) -> list[RawLabel]:
    return _each(path, records, _argilla_record, "record", "Argilla")


def _argilla_record(path: Path, r_no: int, record: dict) -> list[RawLabel]:
    out = []
    meta = record.get("metadata") or {
        k.removeprefix("metadata."): v for k, v in record.items() if k.startswith("metadata.")
    }
    item_id = meta.get("item_id") or record.get("id")
    by_user: dict[str, dict[str, object]] = {}
    for question, responses in _nested(record).items():
        for resp in responses or []:
            if resp.get("status") not in (None, "submitted"):
                continue  # drafts and discards are not labels
            by_user.setdefault(str(resp.get("user_id")), {})[question] = resp.get("value")
    for user, values in by_user.items():
        out.append(
            RawLabel(
                where=f"{path.name} record {item_id or r_no} user {user}",
                item_id=item_id,
                batch_id=meta.get("batch_id"),
                annotator_id=None if user == "None" else user,
                export_id=meta.get("export_id"),
                values={k: v for k, v in values.items() if k in LABEL_FIELDS},
                labelled_at=record.get("updated_at") or record.get("inserted_at"),
            )
        )
    return out


def parse_values(values: dict[str, object]) -> tuple[dict[str, object], list[str]]:
    """Typed label values and the problems found (missing or out-of-range fields)."""
    problems, typed = [], {}
    pref = values.get("preference")
    if pref is None:
        problems.append("missing field preference")
    elif pref not in PREFERENCES:
        problems.append(f"preference {pref!r} is not one of {', '.join(PREFERENCES)}")
    typed["preference"] = pref
    for name in SCORES:
        raw = values.get(name)
        if raw is None or raw == "":
            problems.append(f"missing field {name}")
            continue
        try:
            score = int(str(raw).strip())
        except ValueError:
            score = None
        if score is None or not 1 <= score <= 5:
            problems.append(f"{name} must be an integer 1-5, got {raw!r}")
        typed[name] = score
    reason = str(values.get("reason") or "")
    if pref in PREFERENCES and pref != "tie" and not reason.strip():
        problems.append("missing field reason (required unless preference is tie)")
    typed["reason"] = reason
    return typed, problems
