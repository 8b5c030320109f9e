"""Where a build gets its users: a registry of persona sources, chosen by `personas.source`.

- `library` (the default): prb's persona library and question pools (`personas.library`,
  `personas.questions`), validated as `prb personas validate` does, sampled by preference level;
- a local JSON/JSONL/Parquet file of LaMP-QA / Personalized-RewardBench-style records, or a
  folder of LaMP-QA's own `{category}_{split}.json` files (`personas.split` picks the split);
- `hf:NAME[:CONFIG]`: the same records from a hub dataset, through `datasets` (LaMP-QA:
  `hf:alireza7/LaMP-QA`, its configs are the categories).

A source says which categories it holds (a build's categories default to all of them), gives
the build its personas and questions, validates itself before any call, and names the bytes it
was read from for the resume fingerprint. To add a source: a class here with those methods and
its entry in SOURCES (tried in order, first match wins; any other path is a file), plus a
test; or, from another package, an entry point of the group `prb.persona_sources`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from pipeline.config import PersonaConfig
from pipeline.personas.files import (
    TAXONOMY_PATH,
    PersonaFileError,
    data_files,
    load_questions,
    load_taxonomy,
)
from pipeline.personas.sampling import read_back, sample_personas, scan_pool
from pipeline.records import Persona, Question
from pipeline.registry import Registry
from pipeline.store import sha256_file


def file_digest(path: Path) -> str:
    try:
        return sha256_file(path)[:16]
    except OSError as e:
        raise PersonaFileError(f"{path}: cannot read: {e.strerror}") from None


class LibrarySource:
    """prb's own persona library: curated personas with preferences, and question pools."""

    name = "library"

    def matches(self, spec: str) -> bool:
        return spec == "library"

    def validate(self, cfg: PersonaConfig) -> None:
        from pipeline.personas.checks import check_build_source

        check_build_source(cfg.library, cfg.questions, load_taxonomy(TAXONOMY_PATH))

    def categories(self, cfg: PersonaConfig) -> list[str]:
        return sorted({p.category for p in scan_pool(cfg.library)})

    def sample(self, cfg: PersonaConfig, seed: int) -> Iterable[Persona]:
        # the pool is scanned as ids and levels; only the picks are read back whole
        pool = scan_pool(cfg.library)
        categories = cfg.categories or sorted({p.category for p in pool})
        return read_back(sample_personas(pool, categories, cfg.per_category, seed))

    def questions(self, cfg: PersonaConfig) -> list[Question]:
        return load_questions(cfg.questions)

    def digests(self, cfg: PersonaConfig) -> dict[str, str]:
        return {str(p): file_digest(p) for p in data_files([*cfg.library, *cfg.questions])}


class FileSource:
    """Imported users from a local LaMP-QA / Personalized-RewardBench-style file."""

    name = "file"

    def matches(self, spec: str) -> bool:
        return True

    def _load(self, cfg: PersonaConfig) -> tuple[list[Persona], list[Question]]:
        from pipeline.personas.importer import load_external

        return load_external(cfg.source, cfg.split)

    def validate(self, cfg: PersonaConfig) -> None:
        self._load(cfg)  # the import refuses any bad record, naming it

    def categories(self, cfg: PersonaConfig) -> list[str]:
        return sorted({p.category for p in self._load(cfg)[0]})

    def sample(self, cfg: PersonaConfig, seed: int) -> Iterable[Persona]:
        personas = self._load(cfg)[0]
        categories = cfg.categories or sorted({p.category for p in personas})
        return sample_personas(personas, categories, cfg.per_category, seed)

    def questions(self, cfg: PersonaConfig) -> list[Question]:
        return self._load(cfg)[1]

    def digests(self, cfg: PersonaConfig) -> dict[str, str]:
        from pipeline.personas.importer import source_files

        return {str(p): file_digest(p) for p in source_files(cfg.source, cfg.split)}


class HubSource(FileSource):
    """The same records from a hub dataset (`hf:NAME[:CONFIG]`); needs the network."""

    name = "hub"

    def matches(self, spec: str) -> bool:
        return spec.startswith("hf:")

    def digests(self, cfg: PersonaConfig) -> dict[str, str]:
        return {cfg.source: "hub dataset (not hashed)"}  # reading it would need the network


class PersonaSource(Protocol):
    """What a persona source is: the methods above (LibrarySource shows each)."""

    name: str

    def matches(self, spec: str) -> bool: ...
    def validate(self, cfg: PersonaConfig) -> None: ...
    def categories(self, cfg: PersonaConfig) -> list[str]: ...
    def sample(self, cfg: PersonaConfig, seed: int) -> Iterable[Persona]: ...
    def questions(self, cfg: PersonaConfig) -> list[Question]: ...
    def digests(self, cfg: PersonaConfig) -> dict[str, str]: ...


SOURCES: Registry[PersonaSource] = Registry(
    "persona_sources",
    PersonaSource,
    {"library": LibrarySource(), "hub": HubSource()},
    named=True,
)
FALLBACK = FileSource()  # any other path: tried after every registered source, plugins included


def source_for(cfg: PersonaConfig):
    return next((s for s in SOURCES if s.matches(cfg.source)), FALLBACK)
