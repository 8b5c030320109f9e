"""Stage 1 — personas: a seeded sample of users from the configured source (pipeline/personas/
sources.py): per category, spread over contradicting preference levels."""

from __future__ import annotations

from pipeline.personas.sources import source_for
from pipeline.records import Persona
from pipeline.stages.base import RunContext, Stage, StageReport
from pipeline.store import Records


async def run(ctx: RunContext, _: None) -> StageReport:
    cfg = ctx.cfg.personas
    sample = source_for(cfg).sample(cfg, ctx.cfg.seed)  # a generator: written as it comes
    n = STAGE.file(ctx.run_dir).write_all(sample)
    return StageReport(Records(STAGE.file(ctx.run_dir), STAGE.output_id), n)


STAGE = Stage(
    name="personas",
    output=Persona,
    output_id=lambda p: p.persona_id,
    run=run,
    preflight=lambda cfg: source_for(cfg.personas).validate(cfg.personas),
    funnel="personas",
    about="personas sampled from the persona library, stratified by category and spread over "
    "preference dimensions (seed {seed}, {per_category} per category)",
)
