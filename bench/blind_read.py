"""A blind reading of a release's pairs (issue 46): what a reader, given only the user's posts,
the question and the two answers in a random order, says fits the user better. The final
evidence that only personal fit separates `chosen` from `rejected`.

    .venv/bin/python bench/blind_read.py items RELEASE --out DIR [--seed 0]
        -> DIR/items.jsonl (what the reader sees) and DIR/key.json (which answer is chosen)
    (RELEASE may be a run's pairs.jsonl: every pair made, scored by what each realised)
    .venv/bin/python bench/blind_read.py score DIR/key.json VERDICTS.jsonl

A verdict line: {"item": N, "fits": "A"|"B"|"none", "better_ignoring_user": "A"|"B"|"none",
"difference": "identical"|"slight"|"clear"|"very"}. The score counts a tie as half and says
it with n and a Wilson 95% interval; keep the key away from the reader.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.release.load import load_rows  # noqa: E402
from pipeline.stats import wilson  # noqa: E402


def made(path: Path) -> list[dict]:
    """A run's pairs.jsonl as rows (every pair made, before the filters), each with what its
    two answers were meant to differ on."""
    rows = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            p = json.loads(line)
            task = p["task"]
            rows.append(
                {
                    "id": p["pair_id"],
                    "question": task["question"],
                    "profile": task["persona"]["profile"],
                    "chosen": p["chosen"],
                    "rejected": p["rejected"],
                    "differences": p.get("differences") or [],
                }
            )
    return rows


def items(release: str, out: Path, seed: int) -> None:
    """RELEASE: a release, or a run's pairs.jsonl (every pair made)."""
    if release.endswith("pairs.jsonl"):
        rows = made(Path(release))
    else:
        rows, _ = load_rows(release)
    rng = random.Random(seed)
    rng.shuffle(rows)
    out.mkdir(parents=True, exist_ok=True)
    key = {}
    with open(out / "items.jsonl", "w", encoding="utf-8") as f:
        for n, row in enumerate(rows, 1):
            chosen_first = rng.random() < 0.5
            a, b = (
                (row["chosen"], row["rejected"])
                if chosen_first
                else (row["rejected"], row["chosen"])
            )
            posts = [p["text"] for p in row["profile"]]
            f.write(
                json.dumps({"item": n, "posts": posts, "question": row["question"], "A": a, "B": b})
                + "\n"
            )
            key[n] = {"id": row["id"], "chosen": "A" if chosen_first else "B"}
            shown = [d["dimension"] for d in row.get("differences") or [] if d.get("realised")]
            if shown:
                key[n]["realised"] = shown
    (out / "key.json").write_text(json.dumps(key, indent=1))
    print(f"{len(rows)} items in {out / 'items.jsonl'}; the key in {out / 'key.json'}")


def side(letter: object, chosen: str) -> str:
    """A reader's A/B as chosen, rejected or none."""
    if letter not in ("A", "B"):
        return "none"
    return "chosen" if letter == chosen else "rejected"


def score(key_path: Path, verdicts: Path) -> None:
    key = json.loads(key_path.read_text())
    said = [json.loads(x) for x in verdicts.read_text().split("\n") if x.strip()]
    fits, ignoring, difference = Counter(), Counter(), Counter()
    for v in said:
        chosen = key[str(v["item"])]["chosen"]
        fits[side(v.get("fits"), chosen)] += 1
        ignoring[side(v.get("better_ignoring_user"), chosen)] += 1
        difference[v.get("difference", "?")] += 1
    n = sum(fits.values())
    credit = fits["chosen"] + 0.5 * fits["none"]
    low, high = wilson(round(credit), n)
    print(f"n = {n} pairs read blind")
    print(
        f"fits the user: chosen {fits['chosen']}, rejected {fits['rejected']}, no difference "
        f"{fits['none']}; score (ties ½) {credit / n:.3f} [{low:.3f}, {high:.3f}]"
    )
    print(f"chosen preferred outright: {fits['chosen'] / n:.1%}; none: {fits['none'] / n:.1%}")
    print(f"better ignoring the user: {dict(ignoring)}")
    print(f"how different: {dict(difference)}")
    by_dim: dict[str, Counter] = {}
    for v in said:
        k = key[str(v["item"])]
        for d in k.get("realised", []):
            by_dim.setdefault(d, Counter())[side(v.get("fits"), k["chosen"])] += 1
    for d, c in sorted(by_dim.items()):
        print(f"realised {d}: chosen {c['chosen']}, rejected {c['rejected']}, none {c['none']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    mk = sub.add_parser("items")
    mk.add_argument("release")
    mk.add_argument("--out", type=Path, required=True)
    mk.add_argument("--seed", type=int, default=0)
    sc = sub.add_parser("score")
    sc.add_argument("key", type=Path)
    sc.add_argument("verdicts", type=Path)
    args = ap.parse_args()
    if args.what == "items":
        items(args.release, args.out, args.seed)
    else:
        score(args.key, args.verdicts)


if __name__ == "__main__":
    main()
