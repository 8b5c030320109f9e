"""How many of a build's planner aspects name nothing of their user (issue 46, item 1): what
`rubrics.refuse_generic` refuses, read from a finished run folder's rubrics.jsonl with the
stage's own rule (pipeline/stages/rubrics.py `distinctive`, `generic`).

    .venv/bin/python bench/generic_aspects.py RUN_DIR [RUN_DIR ...] [--examples N]

A recorded real build's run folder comes from its fixture with no model running:
`tests/real_model/record.py NAME --refresh --keep DIR` (DIR/outputs/NAME). Prints, per run,
the aspects used, the share that are generic with its Wilson interval, the tasks whose every
aspect is generic (the plans the refusal drops), and examples of both kinds.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.records import RubricRecord  # noqa: E402
from pipeline.stages.rubrics import distinctive, generic  # noqa: E402
from pipeline.stats import wilson  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--examples", type=int, default=4)
    args = ap.parse_args()
    for run_dir in args.run_dirs:
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
            print(f"{run_dir}: no planner aspects")
            continue
        lo, hi = wilson(len(common), n)
        print(
            f"{run_dir}: {len(words)} users, {len(recs)} planned tasks, {n} aspects used: "
            f"generic {len(common)} = {len(common) / n:.2f} [{lo:.2f}, {hi:.2f}]; "
            f"tasks whose every aspect is generic {whole} of {len(recs)}"
        )
        rng = random.Random(0)
        for label, pool in (("generic", common), ("of the user", seen)):
            for text in rng.sample(pool, min(args.examples, len(pool))):
                print(f"  {label:11} {text[:100]}")


if __name__ == "__main__":
    main()
