"""The local model with several sequences decoded together (llama.cpp's server, parallel slots)
against today's one-at-a-time server, on the requests a real build sends.

    .venv/bin/python bench/local_parallel.py [--server PATH/llama-server] [--parallel 1 2 4 8]

The requests are the first `--requests` recorded in a replay fixture (default: real-fit's, in
the order the build sent them: base answers, rewrites, judges), with their own messages and
sampling. For each server and number of slots the same requests are sent with that many in
flight at once, on a fresh server (nothing cached), first on a quiet machine, then with one
process spinning on a core. A row
gives aggregate generated tokens/s over the wall time, the median and slowest request, the
prompt tokens the server evaluated against those it was sent (what its prompt cache saved),
and how many answers are word-for-word the recorded ones. Figures are from one run: compare
rows within it.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_threads import busy_core  # noqa: E402

from pipeline.llm import local  # noqa: E402
from pipeline.serving import free_port  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def recorded(fixture: Path, n: int) -> list[dict]:
    data = json.loads(gzip.decompress(fixture.read_bytes()))
    return [r for r in data["responses"] if r["request"]["params"].get("max_tokens")][:n]


async def send(base: str, alias: str, items: list[dict], at_once: int) -> dict:
    gate = asyncio.Semaphore(at_once)
    took: list[float] = []
    out = {"generated": 0, "sent": 0, "evaluated": 0, "same": 0}

    async def one(client: httpx.AsyncClient, item: dict) -> None:
        req = item["request"]
        body = {"model": alias, "messages": req["messages"], **req["params"], "seed": req["seed"]}
        async with gate:
            start = time.monotonic()
            r = await client.post(f"{base}/chat/completions", json=body, timeout=900)
            took.append(time.monotonic() - start)
        r.raise_for_status()
        got = r.json()
        out["generated"] += got["usage"]["completion_tokens"]
        out["sent"] += got["usage"]["prompt_tokens"]
        timings = got.get("timings")  # llama.cpp's server: prompt tokens it evaluated
        out["evaluated"] += timings["prompt_n"] if timings else got["usage"]["prompt_tokens"]
        out["same"] += got["choices"][0]["message"]["content"].strip() == item["content"].strip()

    start = time.monotonic()
    async with httpx.AsyncClient() as client:
        await asyncio.gather(*(one(client, item) for item in items))
    wall = time.monotonic() - start
    return {
        **out,
        "wall": wall,
        "tok_s": out["generated"] / wall,
        "median": statistics.median(took),
        "slowest": max(took),
    }


def row(name: str, slots: int, busy: bool, got: dict, n: int) -> str:
    return (
        f"{name:>16} {slots:>5} {'busy' if busy else 'quiet':>6} {got['wall']:>7.0f} "
        f"{got['tok_s']:>9.1f} {got['median']:>8.1f} {got['slowest']:>8.1f} "
        f"{got['evaluated']:>6}/{got['sent']:<6} {got['same']:>3}/{n}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", help="llama.cpp's llama-server binary (default: the one prb finds)")
    ap.add_argument("--parallel", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--fixture", type=Path, default=REPO / "tests/real_model/real-fit.json.gz")
    ap.add_argument("--model", default=local.DEFAULT)
    ap.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    server = args.server or local.llama_server()
    if server is None:  # `make llama-server` not run: today's server alone
        print("llama-server is not built (`make llama-server`): llama-cpp-python's row only")
        args.parallel = []
    items = recorded(args.fixture, args.requests)
    path, digest, _ = local.weights(args.model)
    alias = local.model_id(path, digest)
    print(f"{len(items)} requests from {args.fixture.name}; {args.threads} threads", flush=True)
    print(
        f"{'server':>16} {'slots':>5} {'cores':>6} {'wall s':>7} {'gen tok/s':>9} "
        f"{'median s':>8} {'slowest':>8} {'prompt eval/sent':>13} same"
    )
    runs = []
    if args.baseline:  # today's: llama-cpp-python's server, one request at a time
        runs.append(("llama-cpp-python", 1, None))
    runs += [("llama-server", slots, slots) for slots in args.parallel]
    for name, slots, parallel in runs:
        for busy in (False, True):  # a fresh server each time: no prompt cached from before
            port = free_port()
            # prb's own local server (`local.running`), on the runtime this row measures
            os.environ["PRB_LLAMA_SERVER"] = "none" if parallel is None else str(server)
            served = local.running(
                args.model,
                port=port,
                threads=args.threads,
                batch_threads=args.threads,
                slots=parallel or 1,
            )
            with served, busy_core(busy):
                got = asyncio.run(send(f"http://127.0.0.1:{port}/v1", alias, items, slots))
            print(row(name, slots, busy, got, len(items)), flush=True)


if __name__ == "__main__":
    main()
