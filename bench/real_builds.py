"""What a recorded real-model build cost and shows (issue 37, item 6), from its replay fixture
(tests/real_model/NAME.json.gz) and, when given, the run folder it was recorded in:
responses and tokens by task, calls and tokens per released pair, the funnel with each stage's
drop reasons (the floor's and the artifact gate's among the filters'), where the time went per
model stage (wall time, seconds the model was busy and idle, prompt tokens sent and evaluated,
generated tokens, retries, cut-offs: issue 47), and every probe with its n and 95% interval.

    .venv/bin/python bench/real_builds.py NAME [--run-dir outputs/NAME]

The run folder (a recording's `--keep DIR`/outputs/RUN) adds the drop reasons and, for the
rewrite design, how often each dimension a couple was told to differ on showed in the text
(issue 46 item 3: which dimensions the generator realises); the fixture alone has the counts.
Figures are the recording's: the model's own text, read back.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "real_model")]
from record import fixture_path, read_fixture  # noqa: E402

from pipeline.stats import wilson  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", help="a recording: a name under tests/real_model/ (real-default, …)")
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
    stats = {}
    if args.run_dir and (args.run_dir / "run_stats.json").exists():
        stats = json.loads((args.run_dir / "run_stats.json").read_text())
    where_time_went(stats.get("usage") or fx.get("usage") or {}, stats.get("stages") or {})
    if args.run_dir:
        realised_by_dimension(args.run_dir)
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


def realised_by_dimension(run_dir: Path) -> None:
    """Per dimension a rewrite couple was told to differ on: how often the difference showed
    (pairs made: `differences`; drops as difference_not_realised carry theirs, none shown)."""
    told: Counter = Counter()
    shown: Counter = Counter()
    for name in ("pairs.jsonl", "dropped.jsonl"):
        path = run_dir / name
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        for line in text.splitlines():
            for d in json.loads(line).get("differences") or []:
                told[d["dimension"]] += 1
                shown[d["dimension"]] += bool(d["realised"])
    if not told:
        return
    print("realised by dimension (rewrite design; pairs made and difference_not_realised):")
    for dim, n in told.most_common():
        low, high = wilson(shown[dim], n)
        print(f"  {dim:<18} {shown[dim]:>4} of {n:<4} {shown[dim] / n:.2f} [{low:.2f}, {high:.2f}]")


def where_time_went(usage: dict, stages: dict) -> None:
    """Per stage that called the model: this run's calls (cache hits apart), wall time and the
    seconds the model was busy (idle: prb's own work or waits), prompt tokens sent and those
    evaluated (sent less the server's prompt cache), generated tokens, retries, cut-offs."""
    print("where the time went (this run's calls; a recording from a cache counts only the new):")
    for name, u in sorted(usage.items()):
        spent = stages.get(name, {})
        sent, cached = u.get("prompt_tokens", 0), u.get("cached_prompt_tokens", 0)
        wall = spent.get("wall_s")
        busy = spent.get("model_busy_s", u.get("busy_s"))
        timing = (
            f"wall {wall:,.0f} s, model busy {busy:,.0f} s, idle {wall - busy:,.0f} s; "
            if wall is not None and busy is not None
            else ""
        )
        print(
            f"  {name:<8} {u.get('calls', 0)} calls ({u.get('cache_hits', 0)} cache hits); "
            f"{timing}prompt tokens sent {sent:,}, evaluated {sent - cached:,} "
            f"({cached / sent if sent else 0:.0%} from the server's cache); generated "
            f"{u.get('completion_tokens', 0):,}; retries {u.get('retries') or {}}; "
            f"failures {u.get('failures') or {}}"
        )


if __name__ == "__main__":
    main()
