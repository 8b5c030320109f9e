"""Everything that must hold before a run's first model call.

`open_run` locks the run directory, clears what an interrupted run left half-written, renders
every prompt of the build once with sample values (so a template naming a variable the code does
not pass fails now, not after an hour of paid calls), validates the persona source as
`prb personas validate` does, and checks the config fingerprint.
`stop_message` turns the errors a user can fix into one clear line for the CLI.
"""

from __future__ import annotations

import logging

from pipeline.config import RunConfig
from pipeline.lock import RunLock
from pipeline.prompts import BUILD_TASKS, PromptError, all_prompts
from pipeline.store import (
    check_fingerprint,
    clean_leftovers,
    has_work,
    move_aside,
)

log = logging.getLogger("prb.preflight")

_PROFILE = [{"id": "p1", "category": "sample", "text": "A sample profile item."}]
_ASPECTS = [{"aspect": "An aspect", "evidence": "[p1] 'sample'", "reason": "A reason."}]
# the variables each build task is rendered with (see rubrics.py, pairs.py, filters.py)
SAMPLE_VARIABLES: dict[str, dict] = {
    "planner": {"profile": _PROFILE, "question": "A question?"},
    "content_plan": {"question": "A question?"},
    "chosen": {
        "question": "A question?",
        "key_points": ["A point."],
        "aspects": _ASPECTS,
        "word_budget": 100,
    },
    "rejected": {
        "question": "A question?",
        "key_points": ["A point."],
        "aspects": _ASPECTS,
        "word_budget": 100,
        "strategy": "ignore_aspects",
        "strategy_instruction": "An instruction.",
    },
    "judge_quality": {"question": "A question?", "answer": "An answer."},
    "judge_adherence": {"question": "A question?", "aspects": _ASPECTS, "answer": "An answer."},
    "judge_blind": {"question": "A question?", "answer_a": "One.", "answer_b": "Two."},
}


def check_prompts(cfg: RunConfig) -> None:
    """Load every prompt file and render each build task once; raises PromptError."""
    prompts = all_prompts()
    for task in BUILD_TASKS:
        if task not in prompts:
            raise PromptError(f"prompts/{task}.yaml: missing (the build needs it)")
        prompts[task].render(**SAMPLE_VARIABLES[task])
    known = prompts["rejected"].extra.get("strategies", {})
    unknown = sorted(set(cfg.generation.strategies) - set(known))
    if unknown:
        raise PromptError(
            f"{prompts['rejected'].path}: config generation.strategies names {unknown}, "
            f"which the prompt's strategies table does not define"
        )


def check_source(cfg: RunConfig) -> None:
    """Every persona and question the build may sample is valid (PersonaFileError if not)."""
    from pipeline.personas import TAXONOMY_PATH, load_taxonomy
    from pipeline.personas.checks import check_build_source
    from pipeline.personas.importer import load_external

    p = cfg.personas
    if p.source == "library":
        check_build_source(p.library, p.questions, load_taxonomy(TAXONOMY_PATH))
    else:
        load_external(p.source)  # the import refuses any bad record, naming it


def open_run(cfg: RunConfig, *, force_new: bool = False) -> RunLock:
    """Lock the run directory and check it may be (re)used; the caller releases the lock."""
    run_dir = cfg.run_dir
    lock = RunLock(run_dir).acquire()
    try:
        check_prompts(cfg)
        check_source(cfg)
        if force_new and has_work(run_dir):
            aside = move_aside(run_dir, cfg.run_dir.parent)
            log.warning("--force-new-run: moved the old run %s aside to %s", run_dir, aside)
            lock.info = aside / lock.info.name  # the held lock moved with its directory
            new = RunLock(run_dir).acquire()
            lock.release()
            lock = new
        clean_leftovers(run_dir)
        check_fingerprint(run_dir, cfg)
    except BaseException:
        lock.release()
        raise
    return lock
