"""Import external user profiles: LaMP-QA / Personalized-RewardBench-style records
(`question`, `profile[{id, category, text}]`, `narrative`, `rubric_aspects`, `category`) from a
local JSON/JSONL/Parquet file or a hub dataset (`hf:NAME` or `hf:NAME:CONFIG`), read through
`datasets` and mapped to Persona + Question records.

LaMP-QA as published has no `category` column: the category is the config
(`hf:alireza7/LaMP-QA`, one config per category, splits train/validation/test) or, in the files
LaMP-QA's download script writes, the file name (`{category}_{split}.json`, a JSON list; JSONL
and Parquet too), alone or in a folder of them. `personas.split` picks the split; the
categories, the configs. In that layout every row (every question) is its own user.

One record is one user asking one question. Records that carry the same `persona_id`/`user_id`
(or, lacking one, the same category and profile) are the same persona, which then asks each of
their questions. Any bad record refuses the whole import, naming the record and the field.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from pipeline.errors import PrbError, safe_name
from pipeline.paths import resolve_path
from pipeline.personas.files import PersonaFileError
from pipeline.records import Persona, ProfileItem, Question, RubricAspect, stable_id

REQUIRED = ("question", "profile", "category")
# Imported users are real people's posts, longer than the library's: generous bounds, there only
# to stop a broken file (a 5 MB "post", a profile of a whole forum) from reaching a prompt.
LIMITS = {"profile_text": 20_000, "question": 5_000, "narrative": 10_000, "profile_items": 2_000}
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


SPLITS = ("train", "validation", "test")
LAYOUT = re.compile(rf"^(?P<category>.+)_(?P<split>{'|'.join(SPLITS)})$")  # LaMP-QA's file names


class Part:
    """One piece of a source: its rows, where they came from, and the category its layout
    gives them (a LaMP-QA config or file name; None: each row names its own)."""

    def __init__(self, rows, origin: str, category: str | None = None):
        self.rows, self.origin, self.category = rows, origin, category


def layout_files(folder: Path, split: str | None) -> list[Path]:
    """A folder's LaMP-QA files: `{category}_{split}` .json/.jsonl/.parquet, sorted."""
    found = []
    for p in sorted(folder.iterdir()):
        m = LAYOUT.match(p.stem) if p.suffix in BUILDERS else None
        if m and (split is None or m["split"] == split):
            found.append(p)
    return found


def _local(path: Path, split: str | None) -> list[Part]:
    import datasets

    if path.is_dir():
        files = layout_files(path, split)
        if not files:
            raise PersonaFileError(
                f"{path}: no LaMP-QA files `{{category}}_{{split}}.json|jsonl|parquet`"
                + (f" of split {split!r}" if split else "")
                + " in this folder"
            )
        return [p for f in files for p in _local(f, None)]
    if not path.is_file():
        raise PersonaFileError(f"{path}: no such file")
    if path.suffix not in BUILDERS:
        raise PersonaFileError(f"{path}: expected .json, .jsonl or .parquet")
    m = LAYOUT.match(path.stem)
    rows = datasets.load_dataset(BUILDERS[path.suffix], data_files=str(path), split="train")
    category = m["category"] if m and "category" not in rows.column_names else None
    return [Part(rows, path.name, category)]


def _hub(name: str, config: str, split: str | None) -> list[Part]:
    import datasets

    parts = []
    for c in [config] if config else datasets.get_dataset_config_names(name):
        loaded = datasets.load_dataset(name, c or None)
        for s in [split] if split else list(loaded):
            if s not in loaded:
                raise PersonaFileError(f"hf:{name}: config {c!r} has no split {s!r}")
            rows = loaded[s]
            # LaMP-QA's rows carry no category: their config is it
            category = c if c and "category" not in rows.column_names else None
            parts.append(Part(rows, f"hf:{name}" + (f":{c}/{s}" if c else f"/{s}"), category))
    return parts


def load_parts(source: str, split: str | None = None) -> list[Part]:
    """The source's rows, part by part (a config and split, or a file), through `datasets`."""
    try:
        if source.startswith("hf:"):
            name, _, config = source[3:].partition(":")
            return _hub(name, config, split)
        return _local(resolve_path(source), split)
    except PersonaFileError:
        raise
    except Exception as e:  # datasets raises many kinds (arrow, hub, connection): name the source
        raise PersonaFileError(
            f"{source}: cannot load as a dataset: {type(e).__name__}: {e}"
        ) from e


def _persona_key(row: dict, per_row: bool) -> str:
    explicit = row.get("persona_id") or row.get("user_id")
    if explicit:
        return str(explicit)
    if per_row and (row.get("id") or row.get("question_id")):  # LaMP-QA: a row is a user
        return f"u-{row.get('id') or row.get('question_id')}"
    texts = [(i.get("id"), i.get("text")) for i in row["profile"]]
    return stable_id(row["category"], texts, prefix="u-", n=12)


def map_record(
    row: dict, where: str, origin: str, layout_category: str | None = None
) -> tuple[Persona, Question]:
    """One external record as a Persona and the Question it asks; PersonaFileError if bad.
    `layout_category`: the category its layout gives it (LaMP-QA), whose rows are each their
    own user."""
    per_row = layout_category is not None
    if per_row:
        row = {**row, "category": row.get("category") or layout_category}
    rid = row.get("id") or row.get("question_id")
    label = f"{where}{f' (id {rid!r})' if rid else ''}"
    missing = [f for f in REQUIRED if row.get(f) in (None, "", [])]
    if missing:
        raise PersonaFileError(f"{label}: missing required field(s) {', '.join(missing)}")
    category = row["category"]
    try:  # any category the data brings, as long as it can name a release folder
        safe_name(category, "category")
    except PrbError as e:
        raise PersonaFileError(f"{label}: field category: {e}") from None
    if not isinstance(row["profile"], list):
        raise PersonaFileError(f"{label}: field profile: expected a list of {{id, category, text}}")
    _check_sizes(row, label)
    try:
        profile = [
            ProfileItem(
                id=str(item.get("id") or ""),
                category=item.get("category") or category,
                text=item.get("text") or "",
            )
            for item in row["profile"]
        ]
        aspects = [RubricAspect.model_validate(a) for a in row.get("rubric_aspects") or []]
    except (ValidationError, AttributeError) as e:
        detail = e.errors()[0] if isinstance(e, ValidationError) else {"loc": (), "msg": str(e)}
        field = ".".join(str(p) for p in detail["loc"])
        raise PersonaFileError(
            f"{label}: field profile/rubric_aspects {field}: {detail['msg']}"
        ) from None
    pid = _persona_key(row, per_row)
    bad = [("persona_id", pid)] + [(f"profile.{k}.id", i.id) for k, i in enumerate(profile)]
    if rid:
        bad.append(("id", str(rid)))
    for field, value in bad:
        if not ID.match(value):
            raise PersonaFileError(
                f"{label}: field {field}: id {value!r} has characters outside [A-Za-z0-9._:-] "
                "(or is empty or over 200 characters)"
            )
    narrative = row.get("narrative") or None
    persona = Persona(
        persona_id=pid,
        category=category,
        name=f"imported user {pid}",
        summary=f"User imported from {origin}.",
        profile=profile,
        narrative=narrative,
        source=f"import:{origin}",
    )
    question = Question(
        question_id=str(rid) if rid else stable_id(pid, row["question"], prefix="q-", n=12),
        category=category,
        question=row["question"],
        asked_by=[pid],
        narrative=narrative,
        rubric_aspects=aspects,
    )
    return persona, question


def _check_sizes(row: dict, label: str) -> None:
    checks = [("question", row["question"], LIMITS["question"])]
    checks.append(("narrative", row.get("narrative") or "", LIMITS["narrative"]))
    for k, item in enumerate(row["profile"]):
        text = item.get("text") if isinstance(item, dict) else None
        checks.append((f"profile.{k}.text", text or "", LIMITS["profile_text"]))
    for field, value, limit in checks:
        if isinstance(value, str) and len(value) > limit:
            raise PersonaFileError(f"{label}: field {field}: {len(value)} characters (max {limit})")
    if len(row["profile"]) > LIMITS["profile_items"]:
        raise PersonaFileError(
            f"{label}: field profile: {len(row['profile'])} items (max {LIMITS['profile_items']})"
        )


def to_records(parts: list[Part]) -> tuple[list[Persona], list[Question]]:
    personas: dict[str, Persona] = {}
    questions: dict[str, Question] = {}
    problems: list[str] = []
    rows = ((part, n, row) for part in parts for n, row in enumerate(part.rows, 1))
    for part, n, row in rows:
        origin = part.origin
        try:
            persona, question = map_record(
                dict(row), f"{origin}: record {n}", origin, part.category
            )
        except PersonaFileError as e:
            problems.append(str(e))
            continue
        known = personas.setdefault(persona.persona_id, persona)
        # the same user seen again: keep every profile item once, in first-seen order
        ids = {i.id for i in known.profile}
        known.profile += [i for i in persona.profile if i.id not in ids]
        same = questions.setdefault(question.question_id, question)
        if same.question != question.question or same.asked_by != question.asked_by:
            problems.append(
                f"{origin}: record {n}: question id {question.question_id!r} is used for "
                "two different questions or users"
            )
    if problems:  # one line: the first problem, and how many more there are
        more = f" (and {len(problems) - 1} more like it)" if len(problems) > 1 else ""
        raise PersonaFileError(problems[0] + more)
    if not personas:
        raise PersonaFileError(f"{', '.join(p.origin for p in parts) or 'the source'}: no records")
    return list(personas.values()), list(questions.values())


def source_files(source: str, split: str | None = None) -> list[Path]:
    """The local files a source reads (for the fingerprint); none for a hub dataset."""
    if source.startswith("hf:"):
        return []
    path = resolve_path(source)
    return layout_files(path, split) if path.is_dir() else [path]


def _stamp(source: str, split: str | None) -> tuple:
    return tuple((str(p), p.stat().st_mtime) for p in source_files(source, split) if p.exists())


@lru_cache(maxsize=4)
def _load(source: str, split: str | None, stamp: tuple) -> tuple[tuple, tuple]:
    personas, questions = to_records(load_parts(source, split))
    return tuple(personas), tuple(questions)


def load_external(source: str, split: str | None = None) -> tuple[list[Persona], list[Question]]:
    """Personas and questions from an external source (read once per process and file version:
    the personas and questions stages both ask)."""
    personas, questions = _load(source, split, _stamp(source, split))
    return list(personas), list(questions)
