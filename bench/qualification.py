"""Judge qualification rates (issue 26): how often a judge prefers a sound answer to a corrupted
copy of itself, and gives the same verdict in both A/B orders, for the simulator's judge, its
weak modes (`--judge random`, `always_a`) and, when the `local` extra is installed, the bundled
real model (SmolLM2-135M through llama.cpp). The sound answers are the chosen answers of a
demo build on the simulator, so every judge is asked the same calibration set.

    .venv/bin/python bench/qualification.py [--answers 8] [--no-local]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent


async def rates(config: Path, overrides: dict, pairs: list, folder: Path) -> dict:
    from pipeline.config import load_config
    from pipeline.llm.cache import ResponseCache
    from pipeline.llm.client import LLM
    from pipeline.qualification import qualify
    from pipeline.stages.base import RunContext

    folder.mkdir(parents=True, exist_ok=True)
    cfg = load_config(
        str(config), outputs_dir=str(folder), qualification__accept_weak_judge=True, **overrides
    )
    cache = ResponseCache(folder / "cache.sqlite")
    llm = LLM(cfg.model, cache)
    try:
        return await qualify(RunContext(cfg, folder, llm, cache), pairs)
    finally:
        await llm.aclose()
        cache.close()


def show(name: str, found: dict) -> None:
    p, c = found["prefers_sound"], found["consistent"]
    kinds = found["by_corruption"].items()
    by = ", ".join(f"{k} {v['prefers_sound']['value']:.2f}" for k, v in kinds)
    print(
        f"{name:<28} prefers sound {p['value']:.3f} [{p['low']:.3f}, {p['high']:.3f}] n={p['n']}"
        f" · consistent {c['value']:.3f} [{c['low']:.3f}, {c['high']:.3f}] n={c['n']}"
        f" · {'passes' if found['passed'] else 'FAILS'} · {found['calls']} calls"
        f"\n{'':<28} prefers sound by corruption: {by}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=8)
    ap.add_argument("--no-local", action="store_true", help="skip the real local model")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="prb-qualify-"))
    isolate(tmp)
    from pipeline.records import Pair
    from pipeline.run.flow import build
    from pipeline.sim.server import running
    from pipeline.store import StageFile

    demo = REPO / "configs" / "demo.yaml"
    n = {"qualification__answers": args.answers}
    with prefect_server():
        with running() as url:
            made = asyncio.run(
                build(str(demo), {"model__base_url": url, "outputs_dir": str(tmp / "outputs")})
            )
        pairs = list(StageFile(Path(made["run_dir"]), "pairs", Pair).read())
        print(f"calibration answers from {len(pairs)} pairs of a demo build on the simulator")
        for judge in ("sound", "random", "always_a"):
            with running(judge=judge) as url:
                found = asyncio.run(rates(demo, {"model__base_url": url, **n}, pairs, tmp / judge))
            show(f"simulator judge ({judge})", found)
        if args.no_local:
            return
        try:
            from pipeline.llm import local
        except ImportError:
            print("the local extra is not installed: no real model (make demo-local installs it)")
            return
        with local.running() as (url, alias, digest):
            found = asyncio.run(
                rates(
                    REPO / "configs" / "local.yaml",
                    {**local.overrides(url, alias, digest), **n},
                    pairs,
                    tmp / "local",
                )
            )
        show(alias, found)


if __name__ == "__main__":
    sys.exit(main())
