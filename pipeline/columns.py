"""The release's own columns, those no check declares: their dtype names and card text (a leaf).

The schema (pipeline/release/schema.py) puts the checks' columns and `pair_checks` between the
two groups; the checks' registry reserves every name here, so a plugin check can never declare
(and so rewrite) one of them.
"""

from __future__ import annotations

_S = "string"
BEFORE_CHECKS = {  # column -> (dtype names, card text)
    "id": (_S, "content-derived pair id: hash of persona, question and generation prompt versions"),
    "question": (_S, "the user's question"),
    "profile": (
        [{"id": _S, "category": _S, "text": _S}],
        "the user's own past questions and posts (`id`, `category`, `text`)",
    ),
    "rubric_aspects": (
        [{"aspect": _S, "evidence": _S, "reason": _S}],
        "what this user would judge an answer by, with `evidence` (profile item "
        "ids or a quote) and `reason`",
    ),
    "narrative": (_S, "a short description of the user's needs, written by the planner"),
    "category": (_S, "the config this row belongs to"),
    "chosen": (_S, "the answer that follows every rubric aspect"),
    "rejected": (_S, "the answer with the same key points that misses the aspects"),
    "persona_id": (_S, "the persona in prb's library"),
    "question_id": (_S, "the question in prb's question pools"),
    "rejected_strategy": (_S, "how `rejected` misses the aspects (e.g. `wrong_tone`)"),
    "rejected_for": (_S, "`persona_swap`: the persona the rejected answer was written for"),
    "rejected_for_profile": (
        [{"id": _S, "category": _S, "text": _S}],
        "the profile of the `rejected_for` user (empty when `rejected` was written for no one): "
        "each answer can be judged under the user it was written for",
    ),
    "differences": (
        [{"dimension": _S, "chosen": _S, "rejected": _S, "realised": "bool"}],
        "the rewrite design: each preference dimension the two answers were written to differ "
        "on, the level each was written for and whether the text shows it (`realised`, null "
        "where no model-free reading sees it); empty for the plan design",
    ),
}
AFTER_CHECKS = {
    "would_drop": (
        [_S],
        "what the checks would have dropped this pair for, when they only "
        "recorded (`filters.mode: record`, the published recipe); else empty",
    ),
    "annotation": (
        {
            "verdict": _S,
            "n_labels": "int32",
            "chosen_votes": "int32",
            "rejected_votes": "int32",
            "tie_votes": "int32",
        },
        "human verdict and vote counts (`unlabelled` if no labels were collected)",
    ),
    "generator_model": (_S, "model id that wrote both answers"),
    "judge_model": (_S, "model id of the automatic judges"),
    "prompt_versions": (
        [{"task": _S, "ref": _S}],
        "generation prompt files used (`task`, `ref` = version + content hash)",
    ),
}
