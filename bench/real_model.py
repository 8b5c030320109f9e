"""What a real model reveals: a local model (Qwen2.5-Coder-1.5B by default, or SmolLM2-135M)
through prb's prompts.

    .venv/bin/python bench/real_model.py [--model qwen2.5-1.5b] [--tasks 6] [--build]

For each JSON task (planner, content plan, the three judges), the same requests with structured
output off (`none`: the schema only in the prompt) and on (`json_object_schema`: llama.cpp's
grammar), each sent once with no retry: the share that parse into the output model. For the
answer tasks (chosen, rejected): how many stay within the word budget, and how many are cut off
at the `max_tokens` sized from it. Prompt and generated tokens per second. With `--build`, one
`prb demo --local`-style build on the same server, and its funnel. Every request is new (an
empty response cache per run); the figures come from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config import ModelConfig, load_config
from pipeline.llm import LLM, LLMError, local
from pipeline.llm.cache import ResponseCache
from pipeline.llm.prompts import load_prompt
from pipeline.personas.sources import source_for
from pipeline.stages.pairs import budget_tokens
from pipeline.stages.questions import assign_questions
from pipeline.stages.rubrics import grounded

REPO = Path(__file__).resolve().parent.parent
ASPECT = {"aspect": "Keep it short and practical", "evidence": "[p1]", "reason": "busy user"}
ANSWER = (
    "Start with two short sessions a week. Keep a simple log of what you tried. Ask a "
    "friend who already does it to join you once. Rest when you need to."
)


def tasks(n: int):
    cfg = load_config(REPO / "configs" / "local.yaml", personas={"per_category": 2})
    src = source_for(cfg.personas)
    people = list(src.sample(cfg.personas, cfg.seed))
    return list(assign_questions(people, src.questions(cfg.personas), 1, cfg.seed))[:n]


def variables(task_name: str, t) -> dict:
    q = t.question
    profile = [i.model_dump() for i in t.persona.profile]
    return {
        "planner": {"profile": profile, "question": q},
        "content_plan": {"question": q},
        "judge_quality": {"question": q, "answer": ANSWER},
        "judge_adherence": {"question": q, "aspects": [ASPECT], "answer": ANSWER},
        "judge_blind": {"question": q, "answer_a": ANSWER, "answer_b": ANSWER.upper()},
        "judge_fit": {"question": q, "answer": ANSWER, "user_context": ""},
        "chosen": {
            "question": q,
            "key_points": ["Start small", "Keep a log"],
            "aspects": [ASPECT],
            "word_budget": 100,
        },
        "rejected": {
            "question": q,
            "key_points": ["Start small", "Keep a log"],
            "aspects": [ASPECT],
            "word_budget": 100,
            "strategy": "ignore_aspects",
            "strategy_instruction": "Write for a generic reader.",
        },
    }[task_name]


TASKS = (
    "planner",
    "content_plan",
    "judge_quality",
    "judge_adherence",
    "judge_blind",
    "judge_fit",
    "chosen",
    "rejected",
)


async def measure(base: str, alias: str, mode: str, ts, folder: Path, only) -> dict:
    cfg = ModelConfig(
        base_url=base, structured_output=mode, max_retries=0, timeout_s=600, concurrency=1
    )
    llm = LLM(cfg, ResponseCache(folder / f"{mode}.sqlite"))
    out: dict[str, dict] = {}
    try:
        for name in only or TASKS:
            prompt, row = load_prompt(name), {"ok": 0, "n": 0, "kinds": {}, "words": []}
            cap = budget_tokens(100) if name in ("chosen", "rejected") else None
            for t in ts:
                row["n"] += 1
                try:
                    v = variables(name, t)
                    r = await llm.call(prompt, stage=name, model=alias, variables=v, max_tokens=cap)
                except LLMError as e:
                    row["kinds"][e.kind] = row["kinds"].get(e.kind, 0) + 1
                    continue
                row["ok"] += 1
                row.setdefault("texts", []).append(r.content)
                if name == "planner":  # a plan the rubrics stage keeps: an aspect cites the profile
                    row["grounded"] = row.get("grounded", 0) + any(
                        grounded(a, t) for a in r.value.rubric_aspects
                    )
                if prompt.output is None:
                    row["words"].append(len(r.value.split()))
            out[name] = row
    finally:
        await llm.aclose()
    return out


async def speed(base: str, alias: str, folder: Path) -> dict:
    """Prompt tokens/s from a long prompt with one token out; generated tokens/s from a short
    prompt with a long answer (each timed whole, over HTTP)."""
    import httpx

    long_prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 60)
    out = {}
    async with httpx.AsyncClient(timeout=600) as client:
        for what, content, max_tokens in (
            ("prompt", long_prompt, 1),
            ("generation", "Tell a long story.", 200),
        ):
            t0 = time.monotonic()
            r = await client.post(
                f"{base}/chat/completions",
                json={
                    "model": alias,
                    "messages": [{"role": "user", "content": content}],
                    "max_tokens": max_tokens,
                    "temperature": 0,
                },
            )
            usage = r.json()["usage"]
            tokens = usage["prompt_tokens"] if what == "prompt" else usage["completion_tokens"]
            out[what] = round(tokens / (time.monotonic() - t0), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=6, help="requests per task and mode")
    ap.add_argument("--only", nargs="*", help="only these tasks (default: all seven)")
    ap.add_argument("--build", action="store_true", help="also one small build, with its funnel")
    ap.add_argument("--show", type=int, default=0, help="print this many answers per task")
    ap.add_argument("--model", default=local.DEFAULT, help=", ".join(local.MODELS))
    ap.add_argument(
        "--modes",
        nargs="*",
        default=["none", "json_object_schema"],
        help="structured_output modes to measure",
    )
    args = ap.parse_args()
    ts = tasks(args.tasks)
    with (
        tempfile.TemporaryDirectory(prefix="prb-real-") as tmp,
        local.running(args.model) as served,
    ):
        base, alias, digest = served
        print(f"model {alias} (sha256 {digest[:16]}…) at {base}; {len(ts)} requests per task")
        print("tokens/s:", asyncio.run(speed(base, alias, Path(tmp))))
        for mode in args.modes:
            t0 = time.monotonic()
            rows = asyncio.run(measure(base, alias, mode, ts, Path(tmp), args.only))
            print(f"\nstructured_output={mode} ({time.monotonic() - t0:.0f} s)")
            for name, r in rows.items():
                words = r["words"]
                extra = f"; grounded {r['grounded']}/{r['ok']}" if "grounded" in r else ""
                if words:
                    within = sum(w <= 100 for w in words)
                    extra = (
                        f"; words median {statistics.median(words):.0f}, within 100: "
                        f"{within}/{len(words)}"
                    )
                print(f"  {name:16} parsed {r['ok']}/{r['n']}  failures {r['kinds'] or '-'}{extra}")
                for text in r.get("texts", [])[: args.show]:
                    print("     |", text.replace("\n", "\n     | "))
        if args.build:
            sys.argv = ["prb"]  # the build prints its own funnel
            from pipeline.cli.build import run_build

            overrides = {
                **local.overrides(base, alias, digest),
                "outputs_dir": tmp,
                "run_id": "bench",
            }
            try:
                result = run_build(REPO / "configs" / "local.yaml", overrides)
                print("\nfunnel:", result["funnel"])
            except Exception as e:  # typer.Exit: the build printed its funnel and its one line
                print(f"\nbuild ended with exit {getattr(e, 'exit_code', e)}")


if __name__ == "__main__":
    main()
