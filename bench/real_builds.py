"""What a recorded real-model build cost and shows (issue 37, item 6), from its replay fixture
(tests/real_model/NAME.json.gz) and, when given, the run folder it was recorded in:
responses and tokens by task, calls and tokens per released pair, the funnel with each stage's
drop reasons (the floor's and the artifact gate's among the filters'), and every probe with its
n and 95% interval.

    .venv/bin/python bench/real_builds.py NAME [--run-dir outputs/NAME]

The run folder (a recording's `--keep DIR`/outputs/RUN) adds the drop reasons; the fixture
alone has the counts. Figures are the recording's: the model's own text, read back.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "real_model"))
from record import fixture_path, read_fixture  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", help="a recording: demo-local, real-default, real-instructed")
    ap.add_argument("--run-dir", type=Path, help="the run folder it was recorded in")
    args = ap.parse_args()
    fx = read_fixture(fixture_path(args.name))
    released = fx["funnel"][-1]["count"]
    tasks: Counter = Counter()
    tokens: Counter = Counter()
    for r in fx["responses"]:
        tasks[r["task"]] += 1
        u = r.get("usage") or {}
        tokens["prompt"] += int(u.get("prompt_tokens") or 0)
        tokens["completion"] += int(u.get("completion_tokens") or 0)
    calls = sum(tasks.values()) + len(fx["failures"])
    print(f"{args.name}: {released} pairs released; model {fx['models']['generator']}")
    print(
        f"calls {calls} ({len(fx['failures'])} failed: "
        f"{dict(Counter(f['kind'] for f in fx['failures']))}); by task {dict(tasks)}"
    )
    per = max(1, released)
    print(
        f"tokens: prompt {tokens['prompt']:,}, completion {tokens['completion']:,}; per released "
        f"pair: {calls / per:.1f} calls, {tokens['prompt'] / per:,.0f} prompt + "
        f"{tokens['completion'] / per:,.0f} completion tokens; recording wall {fx['wall_s']} s"
    )
    funnel = fx["funnel"]
    if args.run_dir and (args.run_dir / "funnel.json").exists():
        funnel = json.loads((args.run_dir / "funnel.json").read_text())
    print("funnel:")
    for row in funnel:
        why = ", ".join(f"{k} {v}" for k, v in (row.get("reasons") or {}).items())
        changed = ", ".join(f"{k} {v}" for k, v in (row.get("changed") or {}).items())
        extra = "; ".join(x for x in (why, changed) if x)
        print(f"  {row['stage']:<18} {row['count']:>5}" + (f"  ({extra})" if extra else ""))
    v = fx["validity"]
    print(f"probes (verdict: {v['verdict']}, {v['pairs']} pairs):")
    for family in v["families"]:
        for p in family["probes"]:
            span = "" if p["low"] is None else f" [{p['low']:.3f}, {p['high']:.3f}]"
            value = "-" if p["value"] is None else f"{p['value']:.3f}"
            print(f"  {family['family']:<8} {p['name']:<40} {value}{span} n={p['n']}")
    q = fx["judge_qualification"]
    pf = q.get("position_free") or {}
    print(
        f"judge qualification: pairwise prefers-sound {q['prefers_sound']['value']:.2f} "
        f"(n={q['prefers_sound']['n']}), consistent {q['consistent']['value']:.2f}; passed "
        f"{q['passed']}"
        + (
            f"; position-free prefers-sound {pf['prefers_sound']['value']:.2f} "
            f"(n={pf['prefers_sound']['n']}), passed {pf['passed']}"
            if pf
            else ""
        )
    )


if __name__ == "__main__":
    main()
