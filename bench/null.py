"""The null test at scale (`prb audit --null N`'s figures, timed): on N copies of a release
relabelled by a fair coin per pair (no signal left) each answer-only probe should average 0.5,
vary as a binomial (sd sqrt(0.25 / n)) if its interval is to be honest, and its 95% interval
should exclude 0.5 in about 5% of copies.

    .venv/bin/python bench/null.py RELEASE [--copies 20]

Figures are from one run (copies seeded 1000 + k, as `prb audit --null`).
"""

from __future__ import annotations

import argparse
import time

from pipeline import probes
from pipeline.audit.null import null_test
from pipeline.release.load import load_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("release")
    ap.add_argument("--copies", type=int, default=20)
    args = ap.parse_args()
    rows = load_rows(args.release)[0]
    binomial = (0.25 / len(rows)) ** 0.5
    start = time.perf_counter()
    observed = probes.run_all(rows)
    once = time.perf_counter() - start
    found = null_test(rows, observed, args.copies)
    took = time.perf_counter() - start - once
    print(
        f"{len(rows)} pairs, {args.copies} copies; binomial sd {binomial:.4f}; probes "
        f"{once:.1f} s once, null test {took:.0f} s ({took / once:.1f}x)"
    )
    print("| probe | observed | p | null mean | null sd | sd / binomial | excluding 0.5 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for q in found["probes"]:
        print(
            f"| {q['name']} | {q['observed']:.3f} | {q['p']:.3f} | {q['mean']:.3f} | "
            f"{q['sd']:.4f} | {q['sd'] / binomial:.2f} | {q['excluded']}/{q['runs']}"
            f"{' narrow' if q['narrow'] else ''} |"
        )


if __name__ == "__main__":
    main()
