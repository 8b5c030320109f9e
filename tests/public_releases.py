"""Two small releases in the public schema and the official hub layout, for the probes' tests.

- `controlled`: pairs of users with conflicting preferences (formal/casual, beginner/expert,
  list/prose) answer the same questions; both answers carry the same key points at the same
  length, and one user's chosen answer is the other's rejected. Only the user separates them.
- `leaky`: chosen answers quote the profile, address the reader and lay out a list; rejected
  ones are shorter, generic and hedged. An answer-only rule tells them apart.

`write_hub_layout` writes rows as the public release is laid out: one folder of Parquet per
category config and a card listing the configs, with no default.
"""

from __future__ import annotations

from pathlib import Path

import datasets

QUESTIONS = [
    (
        "How should I start learning the cello?",
        [
            "Rent an instrument before buying one",
            "Book a few lessons to set up posture",
            "Practise open strings slowly every day",
        ],
    ),
    (
        "How do I plan a first vegetable garden?",
        [
            "Pick the sunniest patch of the yard",
            "Start with three easy crops",
            "Water deeply twice a week rather than daily",
        ],
    ),
    (
        "How can I prepare for a half marathon?",
        [
            "Build weekly distance gradually",
            "Keep most runs at an easy pace",
            "Taper during the final fortnight",
        ],
    ),
    (
        "How do I begin writing a family history?",
        [
            "Interview the oldest relatives first",
            "Scan photographs and label them",
            "Write one short chapter per ancestor",
        ],
    ),
    (
        "What is a sensible way to learn to cook?",
        [
            "Master five basic dishes",
            "Learn knife skills early",
            "Cook the same recipe until it feels easy",
        ],
    ),
    (
        "How should I set up a home workshop?",
        [
            "Start with hand tools you will use weekly",
            "Give every tool a fixed place",
            "Add dust extraction before power tools",
        ],
    ),
]
CATEGORIES = ["Art_and_Entertainment", "Lifestyle_and_Personal_Development"]

PROFILES = {
    "formal": "I draft correspondence for a law office and expect proper, polished language.",
    "casual": "lol keep it chill, stiff corporate speak makes my eyes glaze over",
    "novice": "Total beginner here; every guide assumes I already know things.",
    "expert": "I have done this professionally for a decade, so skip the basics.",
    "list": "I read on my phone between meetings, so scannable layouts help.",
    "prose": "I prefer flowing paragraphs to fragmented notes when I read advice.",
}
CONFLICTS = [("formal", "casual"), ("novice", "expert"), ("list", "prose")]


def render(points: list[str], style: str) -> str:
    """The same key points in one style; every style gives the same number of words."""
    a, b, c = points
    return {
        "formal": f"Please note the following. {a}. Furthermore, {b}. Finally, {c}.",
        "casual": f"Okay, here goes now. {a}. Also, {b}. Then, {c}.",
        "novice": f"In simple words: {a}. Next, {b}. Last, {c}.",
        "expert": f"In technical terms: {a}. Then, {b}. Finally, {c}.",
        "list": f"Three steps:\n- {a}.\n- {b}.\n- {c}.",
        "prose": f"Three steps: {a}. {b}. {c}.",
    }[style]


def _row(uid: str, category: str, style: str, other: str, q: int, chosen: str, rejected: str):
    question = QUESTIONS[q][0]
    return {
        "id": f"{uid}-q{q}",
        "question": question,
        "profile": [
            {"id": f"{uid}-p1", "category": category, "text": PROFILES[style]},
            {
                "id": f"{uid}-p2",
                "category": category,
                "text": "Weekends are the only time I get for projects.",
            },
        ],
        "rubric_aspects": [
            {
                "aspect": f"Write for a {style} reader",
                "evidence": f"[{uid}-p1]",
                "reason": f"not {other}",
            }
        ],
        "narrative": f"The user wants a {style} answer.",
        "category": category,
        "chosen": chosen,
        "rejected": rejected,
    }


def controlled(couples: int = 8) -> list[dict]:
    rows = []
    for k in range(couples):  # pairs of users with conflicting preferences, 3 questions each
        first, second = CONFLICTS[k % len(CONFLICTS)]
        category = CATEGORIES[k % 2]
        for q in range(k % 2, len(QUESTIONS), 2):
            points = QUESTIONS[q][1]
            for style, other in ((first, second), (second, first)):
                uid = f"u{k}{style[:2]}"
                rows.append(
                    _row(
                        uid, category, style, other, q, render(points, style), render(points, other)
                    )
                )
    return rows


def leaky(users: int = 16) -> list[dict]:
    rows = []
    for k in range(users):
        style = list(PROFILES)[k % len(PROFILES)]
        category = CATEGORIES[k % 2]
        for q in range(k % 2, len(QUESTIONS), 2):
            a, b, c = QUESTIONS[q][1]
            chosen = (
                f"Since you told me that {PROFILES[style][:40].lower()}, here is your "
                f"plan:\n- {a}.\n- {b}.\n- {c}.\nYou will do great!"
            )
            rejected = f"Generally, it may depend. Perhaps {a.lower()}, possibly {b.lower()}."
            rows.append(_row(f"u{k}", category, style, "generic", q, chosen, rejected))
    return rows


def write_hub_layout(folder: Path, rows: list[dict]) -> Path:
    """One folder of Parquet per category config, a card listing the configs, no default."""
    folder.mkdir(parents=True, exist_ok=True)
    configs = sorted({r["category"] for r in rows})
    card = ["---", "configs:"]
    for name in configs:
        part = datasets.Dataset.from_list([r for r in rows if r["category"] == name])
        (folder / name).mkdir(exist_ok=True)
        part.to_parquet(str(folder / name / "test-00000-of-00001.parquet"))
        card += [
            f"- config_name: {name}",
            "  data_files:",
            "  - split: test",
            f"    path: {name}/test-*",
        ]
    card += ["---", "", "# A test release in the public Personalized RewardBench layout", ""]
    (folder / "README.md").write_text("\n".join(card))
    return folder
