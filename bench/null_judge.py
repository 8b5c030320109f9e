"""The null test of the position-free judge probes: a release relabelled by a fair coin per pair
(N copies), judged by the simulator's position-free judge; the persona-aware and persona-blind
probes should read 0.5 with no interval excluding it more often than chance.

    .venv/bin/python bench/null_judge.py outputs/validity/release --copies 20

(build the release first: `prb demo --config configs/validity.yaml`, ~600 pairs in ~30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from pipeline.audit.null import relabelled
from pipeline.config import ModelConfig
from pipeline.llm import LLM
from pipeline.llm.cache import ResponseCache
from pipeline.probes import run_judges
from pipeline.release.load import load_rows
from pipeline.sim.server import running


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("release")
    ap.add_argument("--copies", type=int, default=20)
    args = ap.parse_args()
    rows, _ = load_rows(args.release)
    found: dict[str, list] = {}
    with running() as url, tempfile.TemporaryDirectory() as tmp:

        async def judged(rs: list[dict]):
            llm = LLM(
                ModelConfig(base_url=url, concurrency=32), ResponseCache(Path(tmp) / "cache.sqlite")
            )
            try:
                return await run_judges(rs, llm, "prb-sim-1", position_free=True)
            finally:
                await llm.aclose()

        for k in range(args.copies):
            for p in asyncio.run(judged(relabelled(rows, 1000 + k))):
                found.setdefault(p.name, []).append(p)
    for name, probes in found.items():
        values = [p.value for p in probes if p.value is not None]
        if not values:  # the swap probe on a release that names no pair's other user
            print(f"{name}: no pair to ask")
            continue
        off = sum(p.low is not None and (p.low > 0.5 or p.high < 0.5) for p in probes)
        print(
            f"{name}: n={len(rows)} mean {statistics.mean(values):.3f} sd "
            f"{statistics.pstdev(values):.3f}; intervals excluding 0.5: {off}/{len(probes)}"
        )


if __name__ == "__main__":
    main()
