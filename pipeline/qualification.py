"""Judge qualification: before the filters trust a judge, it answers a small calibration set
made from the run's own pairs. Each sound answer (a `chosen` answer) is shown beside a
corrupted copy of itself: cut off mid-sentence, its sentences in reverse order, the answer to
another question, or its first line said six times. The persona-blind pairwise judge
(`judge_blind`, the filters' own) is asked in both A/B orders. Two rates:

- prefers sound: the share of verdicts that pick the sound answer (a tie is not a pick);
- consistent: the share of items where both orders pick the same answer (position bias, or a
  coin, shows here).

With `qualification.position_free`, the same items also go to a position-free judge
(`judge_fit`): each answer asked alone "would the asker be satisfied? yes/no", its P(yes) read
from the first token's logprobs; an item counts for the sound answer when its P(yes) is strictly
higher. No order to favour, so no consistency rate. Recorded beside the pairwise judge's rates
(`position_free`) and on the card; the filters' judges are the pairwise ones, so the pass or
fail of the build is theirs.

A judge below the thresholds (`qualification:` in the config) stops the build before the
filters with one line naming its rates; `prb build --accept-weak-judge` builds on and the
manifest and card say so. Calls go through the call path (cached, so a resume asks nothing
again) and are billed to the judge; the rates are kept in `qualification.json`.
"""

from __future__ import annotations

import asyncio
import json
import re
from operator import attrgetter
from pathlib import Path

from pipeline.calls import LLMError, PermanentLLMError
from pipeline.errors import PrbError
from pipeline.llm.prompts import load_prompt
from pipeline.stats import wilson
from pipeline.store import Records, atomic_write

FILE = "qualification.json"
TASK = "judge_blind"
FIT_TASK = "judge_fit"
KINDS = ("truncated", "shuffled", "off_question", "degenerate")


class WeakJudge(PrbError):
    """The judge failed qualification and --accept-weak-judge was not given."""

    exit_code = 9


def truncated(text: str) -> str:
    """Cut off a little past half way, mid-sentence (no closing punctuation)."""
    words = list(re.finditer(r"\S+", text))
    end = words[min(len(words), max(3, len(words) * 11 // 20)) - 1].end() if words else 0
    return text[:end].rstrip(".!?;:,)\"'")  # cut in place: the layout stays


def shuffled(text: str) -> str | None:
    """Its sentences (and lines) in reverse order; None if it has only one."""
    parts = [p for p in re.split(r"(?<=[.!?])\s+|\n+", text.strip()) if p.strip()]
    if len(parts) < 2:
        return None
    return ("\n" if "\n" in text.strip() else " ").join(reversed(parts))


def degenerate(text: str) -> str:
    first = next((x.strip() for x in text.splitlines() if x.strip()), text.strip())
    return "\n".join([first] * 6)


def items(pairs, n: int, sound=lambda _: True) -> list[dict]:
    """Up to n sound answers (chosen answers of distinct questions, by pair id, so a resumed
    run asks the same; of pairs `sound` accepts: above the model-free floor) with their
    corrupted copies: one item per (answer, corruption)."""
    picked: dict[str, tuple[str, str]] = {}  # question -> (pair id, chosen)
    by_id = attrgetter("pair_id")
    ordered = pairs.sorted_by(by_id) if isinstance(pairs, Records) else sorted(pairs, key=by_id)
    for p in ordered:
        if p.task.question not in picked and p.chosen.strip() and sound(p):
            picked[p.task.question] = (p.pair_id, p.chosen)
        if len(picked) > n:  # one more: the last answer's off-question partner
            break
    answers = [(q, pid, text) for q, (pid, text) in picked.items()]
    if len(answers) < 2:
        return []
    out = []
    for i, (question, pid, text) in enumerate(answers[:n]):
        other = answers[(i + 1) % len(answers)][2]
        bad = {
            "truncated": truncated(text),
            "shuffled": shuffled(text),
            "off_question": other,
            "degenerate": degenerate(text),
        }
        out += [
            {
                "pair_id": pid,
                "kind": kind,
                "question": question,
                "sound": text,
                "corrupt": bad[kind],
            }
            for kind in KINDS
            if bad[kind] and bad[kind].strip() != text.strip()
        ]
    return out


def share(hits: list[bool]) -> dict:
    k, n = sum(hits), len(hits)
    lo, hi = wilson(k, n) if n else (None, None)
    return {
        "k": k,
        "n": n,
        "value": round(k / n, 4) if n else None,
        "low": None if lo is None else round(lo, 4),
        "high": None if hi is None else round(hi, 4),
    }


def rates(verdicts: list[tuple[str | None, str | None]]) -> dict:
    """verdicts: per item, (verdict with the sound answer as A, verdict with it as B); None: the
    call failed, and counts in neither rate."""
    picks = [v == good for ab, ba in verdicts for v, good in ((ab, "A"), (ba, "B")) if v]
    same = [
        (ab, ba) in {("A", "B"), ("B", "A"), ("tie", "tie")} for ab, ba in verdicts if ab and ba
    ]
    return {"prefers_sound": share(picks), "consistent": share(same)}


async def position_free(ctx, todo: list[dict], judge: str) -> dict:
    """Every distinct answer of the items asked alone (judge_fit); per item, whether the sound
    answer's P(yes) is strictly above the corrupt one's (a tie counts against it, as ties lose;
    a failed call in neither)."""
    prompt = load_prompt(FIT_TASK)
    keys: list[str] = []

    async def p_yes(question: str, answer: str) -> float | None:
        try:
            result = await ctx.llm.call(
                prompt,
                stage="filters",
                model=judge,
                variables={"question": question, "answer": answer, "user_context": ""},
            )
        except PermanentLLMError:
            raise
        except LLMError:
            return None
        keys.append(result.key)
        return result.value.p_yes

    texts = list(
        dict.fromkeys((i["question"], a) for i in todo for a in (i["sound"], i["corrupt"]))
    )
    got = dict(zip(texts, await asyncio.gather(*(p_yes(q, a) for q, a in texts)), strict=True))

    def picks(items: list[dict]) -> list[bool]:
        pairs = [
            (got[(i["question"], i["sound"])], got[(i["question"], i["corrupt"])]) for i in items
        ]
        return [s > c for s, c in pairs if s is not None and c is not None]

    found = {
        "task": FIT_TASK,
        "calls": len(texts),
        "failed_calls": sum(v is None for v in got.values()),
        "prefers_sound": share(picks(todo)),
    }
    found["by_corruption"] = {k: share(picks([i for i in todo if i["kind"] == k])) for k in KINDS}
    value = found["prefers_sound"]["value"]
    found["passed"] = None if value is None else value >= ctx.cfg.qualification.min_prefers_sound
    found["keys"] = keys
    return found


def line(found: dict) -> str:
    p, c = found["prefers_sound"], found["consistent"]
    t = found["thresholds"]
    return (
        f"the judge {found['judge_model']} prefers the sound answer in {p['value']:.0%} of "
        f"{p['n']} verdicts (needs {t['min_prefers_sound']:.0%}) and gives the same verdict "
        f"in both orders on {c['value']:.0%} of {c['n']} items (needs "
        f"{t['min_consistent']:.0%})"
    )


async def ask_all(ctx, todo: list[dict], judge: str) -> dict:
    """Both orders of every item, through the call path; the rates and whether they pass."""
    cfg = ctx.cfg.qualification
    prompt = load_prompt(TASK)
    keys: list[str] = []

    async def ask(item: dict, sound_first: bool) -> str | None:
        a, b = (item["sound"], item["corrupt"]) if sound_first else (item["corrupt"], item["sound"])
        try:
            result = await ctx.llm.call(
                prompt,
                stage="filters",
                model=judge,
                variables={"question": item["question"], "answer_a": a, "answer_b": b},
            )
        except PermanentLLMError:
            raise
        except LLMError:  # a verdict that never came counts in neither rate
            return None
        keys.append(result.key)
        return result.value.choice

    answers = await asyncio.gather(*(ask(i, first) for i in todo for first in (True, False)))
    verdicts = list(zip(answers[::2], answers[1::2], strict=True))
    found = {
        "judge_model": judge,
        "task": TASK,
        "answers": len({i["pair_id"] for i in todo}),
        "items": len(todo),
        "calls": 2 * len(todo),
    } | rates(verdicts)
    found["by_corruption"] = {
        kind: rates([v for i, v in zip(todo, verdicts, strict=True) if i["kind"] == kind])
        for kind in KINDS
    }
    found["thresholds"] = {
        "min_prefers_sound": cfg.min_prefers_sound,
        "min_consistent": cfg.min_consistent,
    }
    failed = sum(a is None for a in answers)
    found["failed_calls"] = failed
    if 2 * failed > len(answers) or not found["consistent"]["n"]:
        # an endpoint that did not answer is not a weak judge: the filters' own calls meet the
        # same failures and say so; a resume asks again
        found["passed"] = None
    else:
        found["passed"] = (
            found["prefers_sound"]["value"] >= cfg.min_prefers_sound
            and found["consistent"]["value"] >= cfg.min_consistent
        )
    found["keys"] = keys
    if cfg.position_free:
        found["position_free"] = await position_free(ctx, todo, judge)
        found["keys"] = keys + found["position_free"].pop("keys")
    return found


async def qualify(ctx, pairs, sound=lambda _: True) -> dict | None:
    """Ask the calibration set; write and return the rates; raise WeakJudge below the
    thresholds unless accepted. None when qualification is off or there is nothing to ask."""
    cfg = ctx.cfg.qualification
    if not cfg.enabled:
        return None
    judge = ctx.cfg.model.judge
    found = read(ctx.run_dir)
    if not found or found.get("passed") is None or found["judge_model"] != judge:
        todo = items(pairs, cfg.answers, sound)
        # fewer than two sound answers (a weak generator's run: the floor drops nearly all)
        # leaves nothing to ask; said on the card, not taken as a pass
        found = (
            await ask_all(ctx, todo, judge)
            if todo
            else {
                "judge_model": judge,
                "task": TASK,
                "answers": 0,
                "items": 0,
                "calls": 0,
                "failed_calls": 0,
                "passed": None,
                "keys": [],
                "why": "fewer than two answers of distinct questions were above the quality floor",
            }
        )
    # else decided on an earlier try of this run (its settings are in the fingerprint): a
    # resume asks nothing again, and may now accept a weak judge
    skip = ctx.cfg.filters.judges == "qualified" and not found["passed"]
    found["accepted_weak"] = found["passed"] is False and cfg.accept_weak_judge and not skip
    if skip:
        found["judges_skipped"] = True
    else:
        found.pop("judges_skipped", None)
    with atomic_write(Path(ctx.run_dir) / FILE) as f:
        json.dump(found, f, indent=2)
    if found["passed"] is False and not cfg.accept_weak_judge and not skip:
        raise WeakJudge(
            f"{line(found)}: use a stronger judge (model.judge), or pass "
            "--accept-weak-judge to build on with the release marked as judged "
            "by a weak judge"
        )
    return found


def read(run_dir: Path) -> dict | None:
    path = Path(run_dir) / FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
