"""The build's stages, in order: the only place that lists them.

The flow runs them in this order (checked against what each reads), each as a Prefect task;
shards, preflight, the fingerprint, the manifest's prompt list, cost, `prb show` and the card
all read this list. No stage imports another stage: a stage gets its declared input and a
`RunContext` (pipeline/stages/base.py).

To add a stage: a module here declaring `STAGE` (see base.py: what it reads and writes), its
name in REGISTRY below, and a test.
"""

from __future__ import annotations

import functools

from pipeline.checks import CHECKS
from pipeline.registry import Registry
from pipeline.stages.base import (
    RunContext,
    Stage,
    StageReport,
    assemble,
    process_stage,
    prompt_tasks,
)
from pipeline.store import StageFile

# name -> its module's STAGE, in the order they run; another package adds one as an entry
# point of `prb.stages` (a Stage naming the stage it runs `after`)
REGISTRY: Registry[Stage] = Registry(
    "stages",
    Stage,
    {
        name: f"pipeline.stages.{name}:STAGE"
        for name in (
            "personas",
            "questions",
            "rubrics",
            "pairs",
            "filters",
            "annotation",
            "release",
        )
    },
    named=True,
)


@functools.cache
def stages() -> tuple[Stage, ...]:
    """The flow's stages, assembled from what each reads and writes (a stage whose reads no
    earlier stage writes is refused, in one line); plugins load here, on first use."""
    return assemble(REGISTRY)


def __getattr__(name: str):  # `STAGES`: assembled on first use
    if name == "STAGES":
        return stages()
    raise AttributeError(name)


def stage(name: str) -> Stage:
    return next(s for s in stages() if s.name == name)


def written(record_type: type, run_dir) -> StageFile:
    """The stage file of the last stage that writes `record_type` (for tools that read a
    finished run, like the annotation export, without naming a stage's file)."""
    writer = [s for s in stages() if s.output is record_type][-1]
    return writer.file(run_dir)


def model_stages() -> tuple[Stage, ...]:
    """Stages that call a model over their records: concurrent, shardable, billed to a role."""
    return tuple(s for s in stages() if s.role)


def build_tasks(cfg=None) -> tuple[str, ...]:
    """Every prompt task a build (of this config) uses, the stages' and the checks': in the
    fingerprint and the manifest, so a changed prompt file can never go unnoticed."""
    return prompt_tasks(stages(), cfg)


def prompt_samples(cfg=None) -> dict[str, dict]:
    """task -> the sample variables preflight renders it with."""
    return {task: v for s in stages() for task, v in s.prompts(cfg).items()}


def call_order() -> list[str]:
    """The names of every call a pair's records hold, in the order they are made."""
    return [name for s in stages() for name in s.calls]


__all__ = [
    "CHECKS",
    "STAGES",
    "RunContext",
    "StageReport",
    "Stage",
    "build_tasks",
    "call_order",
    "model_stages",
    "process_stage",
    "prompt_samples",
    "stage",
]
