"""Checks on persona and question files: schema, content and cross-record rules.

Used by `prb personas validate` (report everything, change nothing), `prb personas add`
(refuse the whole file on any error) and `prb personas expand` (vet model-written candidates).
Every issue names where it is (file:line), the record id and the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rapidfuzz import fuzz, process, utils

from pipeline.personas.files import (
    PersonaFileError,
    Taxonomy,
    data_files,
    jsonl_records,
    record_id,
    scan_records,
    schema_errors,
)
from pipeline.records import Persona, Question

# Length limits (characters). Library texts are well inside them; past them a text is no
# longer a post or a statement but an essay, and it would crowd the planner's prompt.
LIMITS = {
    "name": 80,
    "summary": 300,
    "profile_text": 600,
    "statement": 200,
    "narrative": 1200,
    "question": 300,
}
MIN_PROFILE, MAX_PROFILE = 5, 12
MIN_PREFERENCES = 3
# rapidfuzz scores, 0-100. The shipped library peaks at 64 (profiles) and 86 (statement vs item,
# token_set); copies and re-worded duplicates score well above these.
NEAR_DUPLICATE = 85  # token_set_ratio of two personas' whole profile text
VERBATIM = 90  # partial_ratio of a preference statement against one profile item
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")


@dataclass(frozen=True)
class Issue:
    where: str  # "file:line" (or "candidate N" for drafts)
    record: str
    field: str
    message: str
    severity: str = "error"  # or "warning": reported, but does not fail validation

    def __str__(self) -> str:
        return (
            f"{self.where}: {self.severity}: record {self.record!r}: {self.field}: {self.message}"
        )


@dataclass(frozen=True)
class Entry:
    """A parsed record and where it came from."""

    where: str
    path: Path | None
    record: Persona | Question

    @property
    def id(self) -> str:
        r = self.record
        return r.persona_id if isinstance(r, Persona) else r.question_id


@dataclass
class Report:
    entries: list[Entry]
    issues: list[Issue]

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def personas(self) -> list[Persona]:
        return [e.record for e in self.entries if isinstance(e.record, Persona)]

    @property
    def questions(self) -> list[Question]:
        return [e.record for e in self.entries if isinstance(e.record, Question)]


# a LaMP-QA user (id, question, profile): a source a build samples from, not a library record
LAMP_QA = {"id", "question", "profile"}
LAMP_QA_HINT = (
    "is in LaMP-QA's format (id, question, profile), not a persona file: build from it with "
    "`personas.source: FOLDER` (configs/demo-lamp-prb.yaml); `prb personas validate` checks "
    "the library's persona and question files"
)


def parse_paths(paths: Iterable[str | Path]) -> tuple[list[Entry], list[Issue]]:
    """Every record of every file; a record with a question_id is a question, else a persona."""
    entries: list[Entry] = []
    issues: list[Issue] = []
    for path in data_files(paths):
        records, problems = scan_records(path)
        issues += [
            Issue(p.split(": ", 1)[0], "?", "<line>", p.split(": ", 1)[-1]) for p in problems
        ]
        if records and all(set(obj) >= LAMP_QA and "persona_id" not in obj for _, obj in records):
            issues.append(Issue(str(path), "*", "<file>", LAMP_QA_HINT))
            continue
        for lineno, obj in records:
            model = Question if "question_id" in obj else Persona
            parsed, errors = schema_errors(obj, model)
            where = f"{path}:{lineno}"
            issues += [Issue(where, record_id(obj), f, m) for f, m in errors]
            if parsed is not None:
                entries.append(Entry(where, path, parsed))
    return entries, issues


def _text(issues: list[Issue], e: Entry, field: str, text: str | None, limit: str) -> None:
    if text is None:
        return
    if not text.strip():
        issues.append(Issue(e.where, e.id, field, "is empty"))
    elif len(text) > LIMITS[limit]:
        issues.append(Issue(e.where, e.id, field, f"is {len(text)} chars (max {LIMITS[limit]})"))


def _id(issues: list[Issue], e: Entry, field: str, value: str) -> None:
    if not ID.match(value):
        issues.append(
            Issue(e.where, e.id, field, f"id {value!r} has characters outside [A-Za-z0-9._:-]")
        )


def persona_issues(e: Entry, tax: Taxonomy) -> list[Issue]:
    p: Persona = e.record  # type: ignore[assignment]
    out: list[Issue] = []
    _id(out, e, "persona_id", p.persona_id)
    _text(out, e, "name", p.name, "name")
    _text(out, e, "summary", p.summary, "summary")
    _text(out, e, "narrative", p.narrative, "narrative")
    if not MIN_PROFILE <= len(p.profile) <= MAX_PROFILE:
        out.append(
            Issue(
                e.where,
                p.persona_id,
                "profile",
                f"has {len(p.profile)} items (need {MIN_PROFILE}-{MAX_PROFILE})",
            )
        )
    seen_text: dict[str, int] = {}
    for k, item in enumerate(p.profile):
        _id(out, e, f"profile.{k}.id", item.id)
        _text(out, e, f"profile.{k}.text", item.text, "profile_text")
        norm = utils.default_process(item.text)
        if norm in seen_text:
            out.append(
                Issue(
                    e.where,
                    p.persona_id,
                    f"profile.{k}.text",
                    f"repeats profile item {seen_text[norm]}",
                )
            )
        seen_text.setdefault(norm, k)
    if len(p.preferences) < MIN_PREFERENCES:
        out.append(
            Issue(
                e.where,
                p.persona_id,
                "preferences",
                f"has {len(p.preferences)} (need at least {MIN_PREFERENCES})",
            )
        )
    seen_dim: dict[str, int] = {}
    for j, pref in enumerate(p.preferences):
        _text(out, e, f"preferences.{j}.statement", pref.statement, "statement")
        if pref.dimension not in tax.levels:
            out.append(
                Issue(
                    e.where,
                    p.persona_id,
                    f"preferences.{j}.dimension",
                    f"unknown dimension {pref.dimension!r}; known: {', '.join(tax.dimensions)}",
                )
            )
        elif pref.level not in tax.levels[pref.dimension]:
            out.append(
                Issue(
                    e.where,
                    p.persona_id,
                    f"preferences.{j}.level",
                    f"unknown level {pref.level!r} of {pref.dimension}; known: "
                    f"{', '.join(tax.levels[pref.dimension])}",
                )
            )
        if pref.dimension in seen_dim:
            out.append(
                Issue(
                    e.where,
                    p.persona_id,
                    f"preferences.{j}.dimension",
                    f"{pref.dimension!r} already stated in preferences.{seen_dim[pref.dimension]}",
                )
            )
        seen_dim.setdefault(pref.dimension, j)
        out += _copies(e, p, j, pref.statement)
    return out


def _copies(e: Entry, p: Persona, j: int, statement: str) -> list[Issue]:
    """Profile items must imply a preference, not restate it: flag near-verbatim copies."""
    stmt = utils.default_process(statement)
    if len(stmt.split()) < 3:
        return []
    out = []
    for k, item in enumerate(p.profile):
        score = fuzz.partial_ratio(stmt, utils.default_process(item.text))
        if score >= VERBATIM:
            out.append(
                Issue(
                    e.where,
                    p.persona_id,
                    f"profile.{k}.text",
                    f"copies preferences.{j}.statement nearly verbatim ({score:.0f}% match): "
                    "profile items should imply preferences, not state them",
                )
            )
    return out


def question_issues(e: Entry) -> list[Issue]:
    out: list[Issue] = []
    _id(out, e, "question_id", e.id)
    _text(out, e, "question", e.record.question, "question")
    return out


def cross_issues(entries: list[Entry], focus: Entry | None = None) -> list[Issue]:
    """Rules across records: unique ids, no near-duplicate personas, asked_by resolves.
    With `focus` (a last entry to vet against the rest) only its near-duplicates are sought."""
    out: list[Issue] = []
    personas = [e for e in entries if isinstance(e.record, Persona)]
    questions = [e for e in entries if isinstance(e.record, Question)]
    first: dict[tuple[str, str], str] = {}

    def unique(e: Entry, kind: str, key: str, field: str, what: str) -> None:
        if (kind, key) in first:
            out.append(
                Issue(
                    e.where, e.id, field, f"duplicate {what} {key!r} (first at {first[kind, key]})"
                )
            )
        else:
            first[kind, key] = e.where

    for e in personas:
        unique(e, "persona", e.id, "persona_id", "persona id")
        for k, item in enumerate(e.record.profile):
            unique(e, "item", item.id, f"profile.{k}.id", "profile item id")
    for e in questions:
        unique(e, "question", e.id, "question_id", "question id")
        unique(
            e,
            "text",
            f"{e.record.category}:{utils.default_process(e.record.question)}",
            "question",
            "question text",
        )
    out += _near_duplicates(personas, focus)
    if personas:  # a question file validated alone cannot resolve asked_by
        out += _asked_by(questions, {e.id: e.record for e in personas})
    return out


def _near_duplicates(personas: list[Entry], focus: Entry | None = None) -> list[Issue]:
    """Each persona against those before it; all pairs are scored in one rapidfuzz call."""
    texts = [" ".join(i.text for i in e.record.profile) for e in personas]
    if len(texts) < 2:
        return []
    rows = [j for j, e in enumerate(personas) if focus is None or e is focus]
    scores = process.cdist(
        [texts[j] for j in rows],
        texts,
        scorer=fuzz.token_set_ratio,
        processor=utils.default_process,
        score_cutoff=NEAR_DUPLICATE,
        workers=1,
    )
    out = []
    for row, j in enumerate(rows):
        e = personas[j]
        for i in range(j):
            if scores[row][i] >= NEAR_DUPLICATE and e.id != personas[i].id:
                out.append(
                    Issue(
                        e.where,
                        e.id,
                        "profile",
                        f"near-duplicate of persona {personas[i].id!r} at {personas[i].where} "
                        f"({scores[row][i]:.0f}% similar profile text)",
                    )
                )
                break
    return out


def _asked_by(questions: list[Entry], personas: dict[str, Persona]) -> list[Issue]:
    out = []
    for e in questions:
        q: Question = e.record  # type: ignore[assignment]
        for k, pid in enumerate(q.asked_by):
            field = f"asked_by.{k}"
            if pid not in personas:
                out.append(Issue(e.where, q.question_id, field, f"unknown persona {pid!r}"))
            elif personas[pid].category != q.category:
                out.append(
                    Issue(
                        e.where,
                        q.question_id,
                        field,
                        f"persona {pid!r} is {personas[pid].category}, the question {q.category}",
                    )
                )
            if pid in q.asked_by[:k]:
                out.append(Issue(e.where, q.question_id, field, f"persona {pid!r} listed twice"))
        askers = [personas[pid] for pid in dict.fromkeys(q.asked_by) if pid in personas]
        if len(askers) > 1 and not _conflict(askers):
            out.append(
                Issue(
                    e.where,
                    q.question_id,
                    "asked_by",
                    "askers share no dimension on different levels, so they want the same answer",
                    severity="warning",
                )
            )
    return out


def _conflict(askers: list[Persona]) -> bool:
    levels = [{p.dimension: p.level for p in a.preferences} for a in askers]
    return any(
        d in b and a[d] != b[d] for i, a in enumerate(levels) for b in levels[i + 1 :] for d in a
    )


def check_entries(entries: list[Entry], tax: Taxonomy) -> list[Issue]:
    issues: list[Issue] = []
    for e in entries:
        issues += persona_issues(e, tax) if isinstance(e.record, Persona) else question_issues(e)
    return issues + cross_issues(entries)


def validate(paths: Iterable[str | Path], tax: Taxonomy) -> Report:
    """Read and check every record under `paths`; nothing is written."""
    entries, issues = parse_paths(paths)
    return Report(entries, issues + check_entries(entries, tax))


# --- what a build checks before its first model call -----------------------------------------


def _records(path: Path):
    """(line, record, problem) of one file, streamed for JSONL so a large pool is never whole
    in memory."""
    if path.suffix == ".jsonl":
        empty = True
        try:
            for lineno, _, obj, problem in jsonl_records(path):
                empty = False
                yield lineno, obj, problem
        except OSError as e:
            yield 0, None, f"{path}: cannot read: {e.strerror}"
            return
        if empty:
            yield 0, None, f"{path}: the file is empty: add records (see personas/README.md)"
        return
    records, problems = scan_records(path)
    for problem in problems:
        yield 0, None, problem
    for lineno, obj in records:
        yield lineno, obj, None


def build_issues(library: Iterable[str | Path], questions: Iterable[str | Path], tax: Taxonomy):
    """Errors in the persona library and question pools that a build refuses to start on:
    every record's schema, ids, text lengths and preferences (as `prb personas validate`), and
    the rules that keep records unambiguous (unique ids, askers of the question's category).
    Near-duplicate
    profiles are a matter of curation, left to `prb personas validate`: comparing every pair of
    a 50,000-persona pool would take hours. Streams records; yields one message per error."""
    first: dict[tuple[str, str], str] = {}
    category_of: dict[str, str] = {}
    personas = 0

    def unique(where: str, rid: str, kind: str, key: str, field: str):
        if (kind, key) in first:
            return (
                f"{where}: record {rid!r}: field {field}: duplicate {kind} id {key!r} "
                f"(first at {first[kind, key]})"
            )
        first[kind, key] = where
        return None

    for kind, paths in (("persona", library), ("question", questions)):
        if kind == "question" and not personas:
            yield f"no personas found in {', '.join(map(str, library))}"
            return
        for path in data_files(paths):
            for lineno, obj, problem in _records(path):
                if problem is not None:
                    yield problem
                    continue
                where = f"{path}:{lineno}"
                model = Persona if kind == "persona" else Question
                parsed, errors = schema_errors(obj, model)
                for field, message in errors:
                    yield f"{where}: record {record_id(obj)!r}: field {field}: {message}"
                if parsed is None:
                    category_of.setdefault(record_id(obj), "?")
                    continue
                e = Entry(where, path, parsed)
                issues = persona_issues(e, tax) if kind == "persona" else question_issues(e)
                yield from (str(i) for i in issues if i.severity == "error")
                yield from filter(None, [unique(where, e.id, kind, e.id, f"{kind}_id")])
                if kind == "persona":
                    personas += 1
                    category_of[e.id] = parsed.category
                    for k, item in enumerate(parsed.profile):
                        found = unique(where, e.id, "profile item", item.id, f"profile.{k}.id")
                        yield from filter(None, [found])
                    continue
                # a question may name askers the build's library lacks (a custom library with
                # the shipped pools): they never ask it, which is harmless; a known asker of
                # another category is a contradiction
                for k, pid in enumerate(parsed.asked_by):
                    if category_of.get(pid, "?") not in ("?", parsed.category):
                        yield (
                            f"{where}: record {e.id!r}: field asked_by.{k}: persona {pid!r} is "
                            f"{category_of[pid]}, the question {parsed.category}"
                        )


def check_build_source(library, questions, tax: Taxonomy, shown: int = 3) -> None:
    """Raise PersonaFileError naming the first problems if the build must not start."""
    problems = []
    for problem in build_issues(library, questions, tax):
        problems.append(problem)
        if len(problems) > 1000:  # enough to say it is broken; no need to read a huge pool
            break
    if problems:
        more = len(problems) - shown
        tail = f" (and {more}{'+' if len(problems) > 1000 else ''} more)" if more > 0 else ""
        raise PersonaFileError(
            "; ".join(problems[:shown])
            + f"{tail}: fix the records (`prb personas validate` lists every problem)"
        )
