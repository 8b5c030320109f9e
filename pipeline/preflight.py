"""Everything that must hold before a run's first model call.

`open_run` locks the run directory, clears what an interrupted run left half-written, renders
every prompt of the build once with sample values (so a template naming a variable the code does
not pass fails now, not after an hour of paid calls), and checks the config fingerprint.
`stop_message` turns the errors a user can fix into one clear line for the CLI.
"""

from __future__ import annotations

import logging

from pipeline.config import ConfigError, RunConfig
from pipeline.lock import RunLock, RunLockedError
from pipeline.prompts import BUILD_TASKS, PromptError, all_prompts
from pipeline.store import (
    FingerprintError,
    StageFileError,
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


def open_run(cfg: RunConfig, *, force_new: bool = False) -> RunLock:
    """Lock the run directory and check it may be (re)used; the caller releases the lock."""
    run_dir = cfg.run_dir
    lock = RunLock(run_dir).acquire()
    try:
        check_prompts(cfg)
        if force_new and has_work(run_dir):
            aside = move_aside(run_dir)
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


# errors whose message says what to fix; anything else is a bug and keeps its traceback
USER_ERRORS = (ConfigError, PromptError, RunLockedError, FingerprintError, StageFileError)


def stop_message(exc: BaseException) -> tuple[str, int] | None:
    """(message, exit code) for an error the user can fix, else None."""
    from pipeline.llm import PermanentLLMError
    from pipeline.personas import PersonaFileError

    if isinstance(exc, RunLockedError):
        return f"run locked: {exc}", 3
    if isinstance(exc, PermanentLLMError):
        return f"the endpoint refused the run (not retried): {exc}", 4
    if isinstance(exc, (*USER_ERRORS, PersonaFileError)):
        return str(exc), 2
    return None
