"""Throughput of the model-call path: N calls at concurrency C through pipeline/llm.py against the
simulator with a fixed latency, versus the ideal C / latency.

    .venv/bin/python bench/throughput.py [--calls 2000] [--concurrency 64] [--latency-ms 200]

Prints achieved calls/s, the ideal, their ratio (target >= 0.85) and the CPU time this process
(the pipeline side: prompt rendering, client, parsing, cache) spent per call. Every call is a
distinct request (a cache miss) of a real prompt file, parsed into its output schema and written
to a fresh response cache, as in a build.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path


async def run(base_url: str, calls: int, concurrency: int, cache_path: Path) -> dict:
    from pipeline.config import ModelConfig
    from pipeline.llm import LLM
    from pipeline.llm.cache import ResponseCache
    from pipeline.llm.prompts import load_prompt

    prompt = load_prompt("content_plan")
    cache = ResponseCache(cache_path)
    llm = LLM(ModelConfig(base_url=base_url, concurrency=concurrency), cache)
    try:
        # warm the connection pool and code paths, outside the measurement
        await asyncio.gather(
            *(
                llm.call(prompt, stage="warm", model="prb-sim-1", variables={"question": f"w{i}"})
                for i in range(concurrency)
            )
        )
        cpu0, t0 = time.process_time(), time.perf_counter()
        results = await asyncio.gather(
            *(
                llm.call(
                    prompt,
                    stage="bench",
                    model="prb-sim-1",
                    variables={"question": f"How should I practise scales, variant {i}?"},
                )
                for i in range(calls)
            )
        )
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await llm.aclose()
        cache.close()
    assert all(not r.cached for r in results) and len(results) == calls
    return {"wall": wall, "cpu": cpu, "usage": llm.usage_dict()["bench"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=200.0)
    args = ap.parse_args()

    from pipeline.sim.server import running

    with running(latency_ms=args.latency_ms) as url, tempfile.TemporaryDirectory() as tmp:
        r = asyncio.run(run(url, args.calls, args.concurrency, Path(tmp) / "cache.sqlite"))
    achieved = args.calls / r["wall"]
    ideal = args.concurrency / max(args.latency_ms / 1000, 1e-9)
    print(
        f"calls={args.calls} concurrency={args.concurrency} latency={args.latency_ms:.0f}ms "
        f"sent={r['usage']['calls']} retries={sum(r['usage']['retries'].values())}"
    )
    print(f"wall={r['wall']:.2f}s achieved={achieved:.1f} calls/s ideal={ideal:.1f} calls/s")
    print(f"achieved/ideal = {achieved / ideal:.3f}  (target >= 0.85)")
    print(f"pipeline CPU per call = {1000 * r['cpu'] / args.calls:.2f} ms")


if __name__ == "__main__":
    main()
