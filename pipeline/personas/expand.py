"""`prb personas expand`: ask the model for new personas aimed at under-covered preference
levels, vet them with the library's own checks, and write the survivors to a review file.

Nothing here writes into the library: a reviewer reads the candidates file and, if happy,
runs `prb personas add FILE`, which validates them again.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pipeline.calls import LLMError
from pipeline.config import RunConfig
from pipeline.llm.cache import ResponseCache
from pipeline.llm.client import LLM
from pipeline.llm.prompts import load_prompt
from pipeline.paths import resolve_path
from pipeline.personas.checks import Entry, cross_issues, parse_paths, persona_issues
from pipeline.personas.files import PersonaFileError, Taxonomy, load_taxonomy
from pipeline.records import Persona, PersonaDraft, ProfileItem, stable_id
from pipeline.store import atomic_write

STAGE = "persona_expand"
PREFIX = {
    "Art_and_Entertainment": "ae",
    "Lifestyle_and_Personal_Development": "lp",
    "Society_and_Culture": "sc",
}
TARGETS_PER_PERSONA = 5  # library personas state 5-6 preferences
SEEDS_PER_PROMPT = 2
MAX_ROUNDS = 3  # rounds of asking again for the candidates that failed the checks


@dataclass
class Plan:
    index: int
    category: str
    targets: list[dict]  # {dimension, level, description}
    seeds: list[Persona]


@dataclass
class ExpandResult:
    path: Path
    accepted: list[Persona] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)  # {index, category, reasons, draft}
    usage: dict = field(default_factory=dict)


def coverage(personas: list[Persona]) -> Counter[tuple[str, str, str]]:
    """How many personas hold each (category, dimension, level)."""
    return Counter((p.category, x.dimension, x.level) for p in personas for x in p.preferences)


def pick_targets(category: str, covered: Counter, tax: Taxonomy, rng: random.Random) -> list[dict]:
    """The least-covered dimensions of a category, each at its least-covered level."""

    def dim_count(d: str) -> int:
        return sum(covered[category, d, lv] for lv in tax.levels[d])

    dims = sorted(tax.dimensions, key=lambda d: (dim_count(d), rng.random()))
    out = []
    for d in dims[:TARGETS_PER_PERSONA]:
        level = min(tax.levels[d], key=lambda lv, d=d: (covered[category, d, lv], rng.random()))
        out.append({"dimension": d, "level": level, "description": tax.levels[d][level]})
    return out


def make_plans(
    n: int,
    start: int,
    categories: list[str],
    library: list[Persona],
    covered: Counter,
    tax: Taxonomy,
    rng: random.Random,
) -> list[Plan]:
    plans = []
    for i in range(start, start + n):
        category = categories[i % len(categories)]
        targets = pick_targets(category, covered, tax, rng)
        # count planned targets as covered, so the next plan aims elsewhere
        covered.update((category, t["dimension"], t["level"]) for t in targets)
        pool = sorted((p for p in library if p.category == category), key=lambda p: p.persona_id)
        seeds = rng.sample(pool, min(SEEDS_PER_PROMPT, len(pool)))
        plans.append(Plan(i, category, targets, seeds))
    return plans


def to_persona(draft: PersonaDraft, category: str) -> Persona:
    pid = f"{PREFIX[category]}-x{stable_id(draft.model_dump(mode='json'), n=8)}"
    return Persona(
        persona_id=pid,
        category=category,
        name=draft.name,
        summary=draft.summary,
        profile=[
            ProfileItem(id=f"{pid}-p{k}", category=item.category, text=item.text)
            for k, item in enumerate(draft.profile, 1)
        ],
        preferences=draft.preferences,
        narrative=draft.narrative,
        source="expand",
    )


def vet(persona: Persona, plan: Plan, known: list[Entry], tax: Taxonomy) -> list[str]:
    """Why a candidate cannot go to review ([] if it can): the library's checks, plus the
    targets it was asked for."""
    entry = Entry(f"candidate {plan.index}", None, persona)
    issues = [i for i in persona_issues(entry, tax) if i.severity == "error"]
    issues += [i for i in cross_issues([*known, entry], focus=entry) if i.where == entry.where]
    reasons = [f"{i.field}: {i.message}" for i in issues]
    held = {(x.dimension, x.level) for x in persona.preferences}
    reasons += [
        f"preferences: target {t['dimension']}={t['level']} missing"
        for t in plan.targets
        if (t["dimension"], t["level"]) not in held
    ]
    return reasons


def candidates_path(cfg: RunConfig, name: str | None, out: Path | None) -> Path:
    path = out or resolve_path(cfg.outputs_dir) / "persona_candidates" / (
        f"{name or datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"
    )
    path = path.resolve()
    for lib in cfg.personas.library:
        if path.is_relative_to(resolve_path(lib).resolve()):
            raise PersonaFileError(f"{path}: candidates go to a review file, not into the library")
    if path.exists():
        raise PersonaFileError(f"{path}: exists; candidates never overwrite a file under review")
    return path


async def expand(
    cfg: RunConfig,
    n: int,
    *,
    categories: list[str] | None = None,
    seed: int = 0,
    name: str | None = None,
    out: Path | None = None,
) -> ExpandResult:
    tax = load_taxonomy()
    entries, issues = parse_paths(cfg.personas.library)
    if errs := [i for i in issues if i.severity == "error"]:
        raise PersonaFileError(f"the library has errors; run `prb personas validate`: {errs[0]}")
    known = [e for e in entries if isinstance(e.record, Persona)]
    library = [e.record for e in known]
    known_categories = sorted({p.category for p in library})  # from the data, not the code
    categories = categories or known_categories
    if bad := [c for c in categories if c not in known_categories]:
        raise PersonaFileError(
            f"no persona of category {bad[0]!r} in the library to seed it from; the library "
            f"has {', '.join(known_categories)}"
        )
    result = ExpandResult(candidates_path(cfg, name, out))
    prompt = load_prompt(STAGE)
    rng = random.Random(f"expand:{seed}")
    covered = coverage(library)
    cache = ResponseCache(cfg.cache_path)
    llm = LLM(cfg.model, cache)
    import asyncio

    try:
        attempts = 0
        for _ in range(MAX_ROUNDS):
            wanted = n - len(result.accepted)
            if wanted <= 0:
                break
            plans = make_plans(wanted, attempts, categories, library, covered, tax, rng)
            attempts += wanted
            calls = [
                llm.call(
                    prompt,
                    stage=STAGE,
                    model=cfg.model.generator,
                    variables={
                        "categories": known_categories,
                        "category": p.category,
                        "targets": p.targets,
                        "seeds": [s.model_dump() for s in p.seeds],
                    },
                    seed=seed + p.index,
                )
                for p in plans
            ]
            answers = await asyncio.gather(*calls, return_exceptions=True)
            for plan, answer in zip(plans, answers, strict=True):
                if isinstance(answer, LLMError):
                    result.rejected.append(
                        {
                            "index": plan.index,
                            "category": plan.category,
                            "reasons": [f"model call: {answer}"],
                            "draft": None,
                        }
                    )
                    continue
                if isinstance(answer, BaseException):
                    raise answer
                persona = to_persona(answer.value, plan.category)
                reasons = vet(persona, plan, known, tax)
                if reasons:
                    result.rejected.append(
                        {
                            "index": plan.index,
                            "category": plan.category,
                            "reasons": reasons,
                            "draft": persona.model_dump(mode="json"),
                        }
                    )
                else:
                    result.accepted.append(persona)
                    known.append(Entry(f"candidate {plan.index}", None, persona))
    finally:
        await llm.aclose()
        cache.close()
    result.usage = llm.usage_dict()
    write_candidates(result)
    return result


def write_candidates(result: ExpandResult) -> None:
    result.path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(result.path) as f:
        for p in result.accepted:
            f.write(json.dumps(p.model_dump(mode="json"), ensure_ascii=False) + "\n")
    if result.rejected:
        with atomic_write(result.path.with_suffix(".rejected.jsonl")) as f:
            for r in result.rejected:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
