"""How many of a build's planner aspects name nothing of their user (issue 46, item 1): what
`rubrics.refuse_generic` refuses, read from a finished run folder's rubrics.jsonl with the
stage's own rule (pipeline/stages/rubrics.py `distinctive`, `generic`).

    .venv/bin/python bench/generic_aspects.py RUN_DIR [RUN_DIR ...] [--examples N]
    .venv/bin/python bench/generic_aspects.py --recorded real-planned

(real-default, real-fit and demo-local take their users' own statements: no planner aspects)

`--recorded NAME` rebuilds a recorded real build offline from its fixture
(tests/real_model/NAME.json.gz, no model running) into a temporary folder and reads that run.
Prints, per run,
the aspects used, the share that are generic with its Wilson interval, the tasks whose every
aspect is generic (the plans the refusal drops), and examples of both kinds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "real_model")]
from _prefect import isolate, prefect_server  # noqa: E402  (bench/ is on sys.path)

from pipeline.records import RubricRecord  # noqa: E402
from pipeline.stages.rubrics import distinctive, generic  # noqa: E402
from pipeline.stats import wilson  # noqa: E402


def replayed(name: str, tmp: Path) -> Path:
    """The run folder of recording `name`, rebuilt offline from its fixture."""
    from record import fixture_path, read_fixture, replay_config

    from pipeline.run.flow import build

    outputs = tmp / name / "outputs"
    outputs.mkdir(parents=True)
    result = asyncio.run(
        build(str(replay_config(name, read_fixture(fixture_path(name)), outputs)), {})
    )
    return Path(result["run_dir"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dirs", nargs="*", type=Path)
    ap.add_argument("--recorded", nargs="+", default=[], help="recordings to rebuild and read")
    ap.add_argument("--examples", type=int, default=4)
    args = ap.parse_args()
    if not args.run_dirs and not args.recorded:
        ap.error("give a run folder or --recorded NAME")
    with tempfile.TemporaryDirectory() as tmp:
        if args.recorded:
            isolate(Path(tmp))
            with prefect_server():
                args.run_dirs += [replayed(n, Path(tmp)) for n in args.recorded]
        report(args.run_dirs, args.examples)


def report(run_dirs: list[Path], examples: int) -> None:
    for run_dir in run_dirs:
        with (run_dir / "rubrics.jsonl").open() as f:
            recs = [RubricRecord.model_validate_json(line) for line in f if line.strip()]
        recs = [r for r in recs if r.source in ("planner", "stated") and r.calls.get("planner")]
        words = distinctive([r.task for r in recs])
        seen, common, whole = [], [], 0
        for r in recs:
            flags = [
                generic(a, r.task, words[r.task.persona.persona_id])
                for a in [*r.rubric_aspects, *r.generic_aspects]
            ]
            for a, g in zip([*r.rubric_aspects, *r.generic_aspects], flags, strict=True):
                (common if g else seen).append(a.aspect)
            whole += all(flags)
        n = len(seen) + len(common)
        if not n:
            print(f"{run_dir.name}: no planner aspects (stated or imported): none generic")
            continue
        lo, hi = wilson(len(common), n)
        print(
            f"{run_dir.name}: {len(words)} users, {len(recs)} planned tasks, {n} aspects used: "
            f"generic {len(common)} = {len(common) / n:.2f} [{lo:.2f}, {hi:.2f}]; "
            f"tasks whose every aspect is generic {whole} of {len(recs)}"
        )
        rng = random.Random(0)
        for label, pool in (("generic", common), ("of the user", seen)):
            for text in rng.sample(pool, min(examples, len(pool))):
                print(f"  {label:11} {text[:100]}")


if __name__ == "__main__":
    main()
