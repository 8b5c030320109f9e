"""The model-free quality floor (issue 26): what each floor check drops, and the judge calls
that saves, on the ≥ 500-pair `configs/validity.yaml` build against the clean simulator and
against a degraded one (`--degrade-rate`: that share of rejected answers is a stock deflection;
`--degenerate-rate`: one line said six times), artifact gate off, with the four instruction
strategies (the simulator plants its faults in the `rejected` task, which persona_swap does not
call).

    .venv/bin/python bench/floor.py [--degrade-rate 0.3] [--degenerate-rate 0.0]

A pair the floor drops meets no judge: the calls it saves are counted as the mean judge calls of
the pairs that did reach the judges. Figures are from one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script
from validity import TODAY, build

FLOOR = ("degenerate", "prompt_copy", "off_question", "bad_text")


def measure(result: dict) -> dict:
    from pipeline.records import FilterRecord
    from pipeline.sim.responder import DEGRADED
    from pipeline.store import StageFile

    records = list(StageFile(Path(result["run_dir"]), "filters", FilterRecord).read())
    floored = [r for r in records if set(FLOOR) & set(r.reasons)]
    judged = [r for r in records if r.calls]
    per_pair = sum(len(r.calls) for r in judged) / len(judged) if judged else 0.0
    degraded = [r for r in records if r.pair.rejected == DEGRADED]
    looped = [
        r
        for r in records
        if len(r.pair.rejected.splitlines()) == 6 and len(set(r.pair.rejected.splitlines())) == 1
    ]
    return {
        "pairs": len(records),
        "by_check": Counter(x for r in floored for x in r.reasons if x in FLOOR),
        "floored": len(floored),
        "floored_with_calls": sum(bool(r.calls) for r in floored),
        "judge_calls_per_judged_pair": round(per_pair, 2),
        "calls_saved": round(len(floored) * per_pair),
        "planted": len(degraded) + len(looped),
        "planted_dropped_by_floor": sum(r in floored for r in degraded + looped),
        "planted_dropped_before_judges": sum(not r.kept and not r.calls for r in degraded + looped),
        "released": result["funnel"]["released"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--degrade-rate", type=float, default=0.3)
    ap.add_argument("--degenerate-rate", type=float, default=0.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="prb-floor-"))
    isolate(tmp)
    from pipeline.sim.server import running

    bad = {"degrade_rate": args.degrade_rate, "degenerate_rate": args.degenerate_rate}
    with prefect_server():
        for name, options in (("clean simulator", {}), (f"degraded simulator {bad}", bad)):
            with running(**options) as url:
                folder = tmp / "".join(c if c.isalnum() else "_" for c in name)
                found = measure(build(folder, url, False, TODAY))
            print(
                f"== {name}: {found['pairs']} pairs judged by the floor; it dropped "
                f"{found['floored']} ({dict(found['by_check'])}; a pair may have several "
                f"reasons), {found['floored_with_calls']} of them after a judge call; planted "
                f"bad answers {found['planted']}, dropped by the floor "
                f"{found['planted_dropped_by_floor']}, by any model-free check (no judge call) "
                f"{found['planted_dropped_before_judges']}; judge calls saved "
                f"~{found['calls_saved']} ({found['judge_calls_per_judged_pair']} per judged "
                "pair); released "
                f"{found['released']}"
            )


if __name__ == "__main__":
    sys.exit(main())
