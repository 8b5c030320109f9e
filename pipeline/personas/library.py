"""Changing and summarising the persona library: `prb personas add` and `prb personas stats`."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pipeline.paths import resolve_path
from pipeline.personas.checks import Report, validate
from pipeline.personas.files import PersonaFileError, Taxonomy
from pipeline.records import Persona, Question
from pipeline.store import atomic_write


def library_line(record: Persona | Question) -> str:
    """One JSONL line in the library's own style (optional fields left out when unset)."""
    data = record.model_dump(mode="json")
    if isinstance(record, Persona) and data.get("source") == "library":
        del data["source"]
    for key in ("narrative", "rubric_aspects"):
        if key in data and not data[key]:
            del data[key]
    return json.dumps(data, ensure_ascii=False)


@dataclass
class AddResult:
    report: Report
    written: dict[Path, int]  # library file -> records appended (empty when refused)


def add_file(file: Path, library: Path, questions: Path, tax: Taxonomy) -> AddResult:
    """Validate `file` together with the library and, only if nothing is wrong anywhere,
    append its personas (and questions) to the library file of their category."""
    file, library, questions = (resolve_path(p).resolve() for p in (file, library, questions))
    for folder in (library, questions):
        if file.is_relative_to(folder):
            raise PersonaFileError(f"{file}: already inside {folder}; add a file from elsewhere")
    report = validate([library, questions, file], tax)
    new = [e for e in report.entries if e.path is not None and e.path.resolve() == file]
    if report.errors:
        return AddResult(report, {})
    if not new:
        raise PersonaFileError(f"{file}: no records to add")
    lines: dict[Path, list[str]] = {}
    for e in new:
        folder = library if isinstance(e.record, Persona) else questions
        target = folder / f"{e.record.category.lower()}.jsonl"
        lines.setdefault(target, []).append(library_line(e.record))
    _append_all(lines)
    return AddResult(report, {p: len(v) for p, v in lines.items()})


def _append_all(lines: dict[Path, list[str]]) -> None:
    """Write every grown file beside its original first, then swap them in, so a failure part
    way leaves the library as it was."""
    # an error in any file unwinds every atomic_write unrenamed; renames happen only at the end
    with ExitStack() as stack:
        for target, new in lines.items():
            old = target.read_text(encoding="utf-8") if target.exists() else ""
            if old and not old.endswith("\n"):
                old += "\n"
            stack.enter_context(atomic_write(target)).write(old + "\n".join(new) + "\n")


@dataclass
class Coverage:
    personas: Counter  # category -> personas
    cells: Counter  # (category, dimension) -> personas holding a preference on it
    levels: dict  # (category, dimension) -> set of levels held
    questions: Counter  # category -> questions
    shared: Counter  # category -> questions asked by several personas

    @property
    def categories(self) -> list[str]:
        """The categories the library holds (from the data: a new one shows up by itself)."""
        return sorted(self.personas)

    def gaps(self, tax: Taxonomy) -> list[tuple[str, str]]:
        return [(c, d) for c in self.categories for d in tax.dimensions if not self.cells[c, d]]


def coverage(personas: list[Persona], questions: list[Question]) -> Coverage:
    cells: Counter = Counter()
    levels: dict = {}
    for p in personas:
        for x in p.preferences:
            cells[p.category, x.dimension] += 1
            levels.setdefault((p.category, x.dimension), set()).add(x.level)
    return Coverage(
        personas=Counter(p.category for p in personas),
        cells=cells,
        levels=levels,
        questions=Counter(q.category for q in questions),
        shared=Counter(q.category for q in questions if len(q.asked_by) > 1),
    )
