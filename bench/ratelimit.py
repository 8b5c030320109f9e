"""A rate-limited endpoint: how close prb runs to the limit, and how many requests it gets 429'd.

    .venv/bin/python bench/ratelimit.py [--calls 600] [--rpm 600] [--tpm 300000]
        [--latency-ms 200] [--concurrency 32]

The simulator enforces `--rpm`/`--tpm` as a provider does (two buckets refilled continuously,
one second deep, a request charged its prompt tokens plus `max_tokens` on arrival, a 429 with
`retry-after` and OpenAI's `x-ratelimit-*` headers over the limit). The same N distinct calls of
real prompt files (content plans and quality judgements with answers of varied length) go
through pipeline/llm.py three ways:

- `unset`: no limits and the headers ignored (prb before rate limits: concurrency only);
- `set`: `model.requests_per_minute` / `model.tokens_per_minute` given;
- `learnt`: nothing given; limits read from the first answer's headers (the default).

Each row: wall time, the limit-bound ideal (the binding limit's work divided by that limit),
achieved = ideal / wall (the share of the binding limit used), and the share of requests sent
that were answered 429. Targets: achieved >= 0.95, 429s <= 1%, wall <= 1.1 x ideal.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

ANSWER = (
    "Begin with the basics and practise a little every day. Keep notes on what worked. "
    "Ask for feedback from someone more experienced. "
)


def workload(n: int) -> list[tuple[str, dict]]:
    """N distinct calls: content plans and quality judgements, answers of 1-4 paragraphs."""
    out = []
    for i in range(n):
        question = f"How should I start learning the cello at forty, case {i}?"
        if i % 2:
            out.append(("content_plan", {"question": question}))
        else:
            out.append(("judge_quality", {"question": question, "answer": ANSWER * (1 + i % 4)}))
    return out


async def run(base_url: str, calls, mode: str, args, cache_path: Path) -> dict:
    from pipeline.config import ModelConfig
    from pipeline.llm import LLM, LLMError
    from pipeline.llm.cache import ResponseCache
    from pipeline.llm.prompts import load_prompt

    limits = {
        "set": {"requests_per_minute": args.rpm, "tokens_per_minute": args.tpm},
        "unset": {"rate_limits_from_headers": False},
        "learnt": {},
    }[mode]
    cfg = ModelConfig(
        base_url=base_url,
        concurrency=args.concurrency,
        max_retries=20,
        structured_output="none",
        **limits,
    )
    cache = ResponseCache(cache_path)
    llm = LLM(cfg, cache)
    prompts = {name: load_prompt(name) for name in ("content_plan", "judge_quality")}

    async def one(task, variables):
        try:
            await llm.call(prompts[task], stage="bench", model="prb-sim-1", variables=variables)
            return True
        except LLMError:
            return False

    t0 = time.perf_counter()
    try:
        ok = await asyncio.gather(*(one(t, v) for t, v in calls))
    finally:
        await llm.aclose()
        cache.close()
    return {
        "wall": time.perf_counter() - t0,
        "failed": ok.count(False),
        "usage": llm.usage_dict()["bench"],
        "limiter": llm.limiter.stats,
    }


def cost(calls) -> tuple[int, int]:
    """Requests and tokens the simulator charges for the workload: its tokens are words."""
    from pipeline.llm.prompts import load_prompt

    tokens = 0
    for task, variables in calls:
        prompt = load_prompt(task)
        tokens += sum(len(m["content"].split()) for m in prompt.render(**variables))
        tokens += int(prompt.params.get("max_tokens") or 0)
    return len(calls), tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=600)
    ap.add_argument("--rpm", type=float, default=600)
    ap.add_argument("--tpm", type=float, default=300_000)
    ap.add_argument("--latency-ms", type=float, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()

    from pipeline.sim.server import running

    calls = workload(args.calls)
    n, tokens = cost(calls)
    ideal = max(n / args.rpm, tokens / args.tpm) * 60
    binding = "requests" if n / args.rpm >= tokens / args.tpm else "tokens"
    print(
        f"{n} calls, {tokens} tokens charged (prompt + max_tokens); limits {args.rpm:g} rpm, "
        f"{args.tpm:g} tpm; latency {args.latency_ms:g} ms, concurrency {args.concurrency}"
    )
    print(f"limit-bound ideal {ideal:.1f} s ({binding} bind)\n")
    print(
        f"{'limits':8} {'wall s':>7} {'achieved':>9} {'429s':>7} {'sent':>5} {'failed':>6}"
        f" {'wall/ideal':>10}"
    )
    for mode in ("unset", "set", "learnt"):
        with (
            running(latency_ms=args.latency_ms, rpm=args.rpm, tpm=args.tpm) as url,
            tempfile.TemporaryDirectory() as tmp,
        ):
            r = asyncio.run(run(url, calls, mode, args, Path(tmp) / "cache.sqlite"))
            stats = httpx.get(url.removesuffix("/v1") + "/stats").json()
        sent = stats.get("requests", 0)
        share = stats.get("rate_limited", 0) / sent if sent else 0.0
        print(
            f"{mode:8} {r['wall']:7.1f} {ideal / r['wall']:9.3f} {share:7.2%} {sent:5d} "
            f"{r['failed']:6d} {r['wall'] / ideal:10.3f}"
        )
    print("\ntargets: achieved >= 0.95, 429s <= 1%, wall/ideal <= 1.1")


if __name__ == "__main__":
    main()
