"""The local model's speed by thread count, on a quiet machine and with one core busy.

    .venv/bin/python bench/local_threads.py [--model qwen2.5-1.5b] [--threads 1 2]

For each thread count, llama-cpp-python's server is started on the model and timed on a long
prompt (prompt tokens/s, one token out) and a long answer (generated tokens/s), first with
nothing else running, then with one process spinning on a core (as on a shared CI machine).
Figures are from one run; compare them within it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_model import speed  # noqa: E402

from pipeline.llm import local  # noqa: E402


def spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy_core(on: bool):
    proc = multiprocessing.Process(target=spin, daemon=True) if on else None
    if proc:
        proc.start()
    try:
        yield
    finally:
        if proc:
            proc.terminate()
            proc.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=local.DEFAULT)
    ap.add_argument(
        "--threads", nargs="*", default=["1/1", "2/2", "1/2"], help="generation/prompt threads"
    )
    args = ap.parse_args()
    print(f"{'gen/prompt threads':>18} {'machine':>8} {'prompt tok/s':>13} {'gen tok/s':>10}")
    for pair in args.threads:
        gen, batch = (int(x) for x in pair.split("/"))
        with local.running(args.model, threads=gen, batch_threads=batch) as (base, alias, _):
            for busy in (False, True):
                with busy_core(busy), tempfile.TemporaryDirectory() as tmp:
                    got = asyncio.run(speed(base, alias, Path(tmp)))
                print(
                    f"{pair:>18} {'busy' if busy else 'quiet':>8} {got['prompt']:>13} "
                    f"{got['generation']:>10}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
