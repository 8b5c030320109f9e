"""The build's stages, in order: the only place that lists them.

The flow runs them in this order, each as a Prefect task; shards, preflight, the fingerprint,
the manifest's prompt list, cost, `prb show` and the card all read this list. No stage imports
another stage: a stage gets the previous stage's output and a `RunContext` (pipeline/stages/
base.py).

To add a stage: a module here declaring `STAGE` (see base.py), its line below, and a test.
"""

from __future__ import annotations

from pipeline.checks import CHECKS
from pipeline.stages import annotation, filters, pairs, personas, questions, release, rubrics
from pipeline.stages.base import RunContext, Stage, process_stage, prompt_tasks

STAGES: tuple[Stage, ...] = (
    personas.STAGE,
    questions.STAGE,
    rubrics.STAGE,
    pairs.STAGE,
    filters.STAGE,
    annotation.STAGE,
    release.STAGE,
)


def stage(name: str) -> Stage:
    return next(s for s in STAGES if s.name == name)


def model_stages() -> tuple[Stage, ...]:
    """Stages that call a model over their records: concurrent, shardable, billed to a role."""
    return tuple(s for s in STAGES if s.role)


def build_tasks(cfg=None) -> tuple[str, ...]:
    """Every prompt task a build (of this config) uses, the stages' and the checks': in the
    fingerprint and the manifest, so a changed prompt file can never go unnoticed."""
    return prompt_tasks(STAGES, cfg)


def prompt_samples(cfg=None) -> dict[str, dict]:
    """task -> the sample variables preflight renders it with."""
    return {task: v for s in STAGES for task, v in s.prompts(cfg).items()}


def call_order() -> list[str]:
    """The names of every call a pair's records hold, in the order they are made."""
    return [name for s in STAGES for name in s.calls]


__all__ = ["CHECKS", "STAGES", "RunContext", "Stage", "build_tasks", "call_order",
           "model_stages", "process_stage", "prompt_samples", "stage"]  # fmt: skip
