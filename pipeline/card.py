"""The dataset card (README.md) of a release, rendered from its manifest alone, so the card can
say nothing the manifest does not record. The YAML header is what `datasets` and the Hub read:
one config per category plus `all`, each with its features and row count."""

from __future__ import annotations

import math

import datasets
import yaml

from pipeline.annotation import card_section as annotation_card

COLUMN_DOCS = {
    "id": "content-derived pair id: hash of persona, question and generation prompt versions",
    "question": "the user's question",
    "profile": "the user's own past questions and posts (`id`, `category`, `text`)",
    "rubric_aspects": "what this user would judge an answer by, with `evidence` (profile item "
    "ids or a quote) and `reason`",
    "narrative": "a short description of the user's needs, written by the planner",
    "category": "the config this row belongs to",
    "chosen": "the answer that follows every rubric aspect",
    "rejected": "the answer with the same key points that misses the aspects",
    "persona_id": "the persona in prb's library",
    "question_id": "the question in prb's question pools",
    "rejected_strategy": "how `rejected` misses the aspects (e.g. `wrong_tone`)",
    "quality": "judge scores 1–5 (correctness, relevance, helpfulness) for each answer",
    "pair_checks": "quality gap, fraction of aspects each answer satisfies, persona-blind judge "
    "verdicts in both A/B orders, length ratio (rejected/chosen words), answer similarity",
    "annotation": "human verdict and vote counts (`unlabelled` if no labels were collected)",
    "generator_model": "model id that wrote both answers",
    "judge_model": "model id of the automatic judges",
    "prompt_versions": "generation prompt files used (`task`, `ref` = version + content hash)",
}

STAGE_DOCS = {
    "personas": "personas sampled from the persona library, stratified by category and spread "
    "over preference dimensions (seed {seed}, {per_category} per category)",
    "questions": "one question per persona: its own question if it has one, else one from the "
    "category's pool",
    "rubrics": "a planner model derives rubric aspects, each citing profile items as evidence, "
    "and a narrative",
    "pairs": "a content plan shared by both answers, then `chosen` (follows every aspect) and "
    "`rejected` (same key points, one named strategy that misses them), each ≤ {budget} words",
    "filters_kept": "pairs that passed every automatic check (thresholds below)",
    "annotation_passed": "pairs whose human verdict allows release (human labels {required})",
    "released": "rows in this release",
}

FILTER_DOCS = {
    "min_quality": "each answer's mean judge score (correctness, relevance, helpfulness) ≥",
    "max_quality_gap": "difference between the two answers' mean judge scores ≤",
    "min_adherence_chosen": "fraction of aspects `chosen` satisfies ≥",
    "max_adherence_rejected": "fraction of aspects `rejected` satisfies ≤",
    "min_length_ratio": "rejected/chosen word ratio ≥",
    "max_length_ratio": "rejected/chosen word ratio ≤",
    "max_answer_similarity": "textual similarity of the two answers ≤",
    "max_question_similarity": "two questions of one persona at least this similar (token-set "
    "ratio) are duplicates; the later pair is dropped:",
    "drop_blind_separated": "drop pairs a judge without the profile tells apart in both orders:",
}


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _source_note(source: str) -> str:
    if source == "library":
        return (
            "The personas, profiles and questions come from prb's own persona library; no "
            "PersonaHub data is included."
        )
    return f"The personas and profiles were imported from `{source}`; its licence also applies."


def card_header(manifest: dict, features: datasets.Features) -> dict:
    counts, sizes = manifest["per_category"], manifest["num_bytes"]
    configs = [("all", "*/test-*.parquet", sum(counts.values()), sum(sizes.values()))] + [
        (c, f"{c}/test-00000-of-00001.parquet", n, sizes[c]) for c, n in counts.items()
    ]
    feature_yaml = datasets.DatasetInfo(features=features)._to_yaml_dict()["features"]
    return {
        "pretty_name": "Personalized RewardBench (prb build)",
        "license": manifest["license"],
        "language": ["en"],
        "task_categories": ["text-classification"],
        "tags": ["reward-modeling", "personalization", "preference-pairs"]
        + (["simulated"] if manifest["simulated"] else []),
        "size_categories": ["n<1K" if sum(counts.values()) < 1000 else "1K<n<10K"],
        "configs": [
            {"config_name": name, "data_files": [{"split": "test", "path": path}]}
            | ({"default": True} if name == "all" else {})
            for name, path, _, _ in configs
        ],
        "dataset_info": [
            {
                "config_name": name,
                "features": feature_yaml,
                "splits": [{"name": "test", "num_bytes": size, "num_examples": n}],
            }
            for name, _, n, size in configs
        ],
    }


def render_card(manifest: dict, features: datasets.Features) -> str:
    cfg = manifest["config"]
    stats = manifest["stats"]
    counts = manifest["per_category"]
    total = sum(counts.values())
    required = manifest.get("annotation", {}).get("required", cfg["annotation"]["required"])
    unlabelled = stats["verdicts_released"].get("unlabelled", 0)
    smallest = min(counts.values(), default=0)
    noise = round(100 * 1.96 * 0.5 / math.sqrt(smallest)) if smallest else None

    sim_note = (
        "> **Simulated build.** Every answer and judgement in this release comes from prb's "
        "bundled deterministic simulator, not from a language model. It demonstrates and tests "
        "the pipeline; do not use it to rank reward models.\n\n"
        if manifest["simulated"]
        else ""
    )
    fmt = {
        "seed": manifest["seeds"]["run"],
        "per_category": cfg["personas"]["per_category"],
        "budget": cfg["generation"]["word_budget"],
        "required": "required" if required else "not required",
    }
    funnel_rows, prev = [], None
    for i, step in enumerate(manifest["funnel"], 1):
        dropped = "" if prev is None else prev - step["count"]
        doc = STAGE_DOCS.get(step["stage"], "").format(**fmt)
        funnel_rows.append([i, f"`{step['stage']}`", step["count"], dropped, doc])
        prev = step["count"]
    reasons = manifest["drop_reasons"]
    reasons_md = (
        _table(["reason", "records"], [[f"`{k}`", v] for k, v in reasons.items()])
        if reasons
        else "No record was dropped."
    )
    prompts_md = _table(
        ["task", "version", "file SHA-256 (first 12)"],
        [[f"`{t}`", p["version"], f"`{p['sha256'][:12]}`"] for t, p in manifest["prompts"].items()],
    )
    thresholds_md = _table(
        ["setting", "rule", "value"],
        [[f"`{k}`", FILTER_DOCS.get(k, ""), v] for k, v in cfg["filters"].items()],
    )
    columns_md = _table(
        ["column", "meaning"], [[f"`{c}`", COLUMN_DOCS.get(c, "")] for c in features]
    )
    sizes_md = _table(
        ["config", "pairs (split `test`)"],
        [["`all` (default)", total]] + [[f"`{c}`", n] for c, n in counts.items()],
    )
    strategies = ", ".join(f"`{k}` {v}" for k, v in stats["rejected_strategies"].items())
    verdicts = ", ".join(f"`{k}` {v}" for k, v in stats["verdicts_released"].items()) or "none"
    blind = stats["blind_picked"]
    limitations = [
        "The personas are synthetic and curated. Their profile items imply preferences but do "
        "not cover every preference dimension for every user.",
        "The automatic judges can share the generator's blind spots. The persona-blind check and "
        "human annotation reduce that risk but do not remove it.",
        "Each user has one question and one pair. Results therefore say how a reward model "
        "treats these users, not how it treats a population.",
    ]
    if noise is not None:
        limitations.append(
            f"The smallest config has {smallest} pairs, so an accuracy measured on it is "
            f"uncertain by about ±{noise} points (95% interval at 50% accuracy)."
        )
    if unlabelled:
        limitations.append(
            f"{unlabelled} of {total} released pairs have no human verdict yet; for those, the "
            "automatic filters alone decided that `chosen` fits the user better."
        )
    if manifest["simulated"]:
        limitations.append(
            "This build is simulated: its texts are template output and its scores are synthetic."
        )
    body = f"""# {manifest["name"]}

{sim_note}## What it measures

This benchmark tests whether a reward model prefers the answer that fits **one particular
user** over an answer that is just as good in general. Each row holds a user's profile (their
own past questions and posts), one question from that user, the rubric aspects this user would
judge an answer by, and two answers. `chosen` follows those aspects. `rejected` makes the same
points under the same word budget but misses them. Automatic judges checked that the two answers
are equally correct, relevant and helpful, so personal fit is the only thing that separates them.

A reward model wins a pair only if it scores `chosen` **strictly** above `rejected` given the
user's profile and question; ties count as losses. Report accuracy per config and overall, with
length bias next to it (mean words here: `chosen` {stats["mean_words"]["chosen"]}, `rejected`
{stats["mean_words"]["rejected"]}).

The first eight columns follow the public Personalized RewardBench release; the columns after
them record how each row was made.

## Configs and size

{sizes_md}

```python
from datasets import load_dataset
ds = load_dataset("<this repository or folder>", "Art_and_Entertainment", split="test")
```

Each config's rows are also in `<config>/test.jsonl`, one JSON object per line, for readers who
do not use `datasets`.

## Columns

{columns_md}

## How the pairs were built

{_table(["step", "stage", "count", "dropped", "what happened"], funnel_rows)}

Why records were dropped (a pair can fail several checks):

{reasons_md}

Strategies of the released `rejected` answers: {strategies or "none"}.

The persona-blind judge sees both answers without the profile, in both orders. On the released
pairs it consistently picked `chosen` {blind.get("chosen", 0)} times and `rejected`
{blind.get("rejected", 0)} times, and could not separate them {blind.get("none", 0)} times.

## Models and prompts

Generator: `{manifest["models"]["generator"]}`. Judge: `{manifest["models"]["judge"]}`.
Sampling seed: {manifest["seeds"]["model"]}. Every prompt is a versioned file in prb's `prompts/`:

{prompts_md}

## Filter thresholds

{thresholds_md}

## Annotation

Human verdicts are {fmt["required"]} for release in this build. Verdicts on the released
pairs: {verdicts}.

{annotation_card(manifest.get("annotation"))}

## Known limitations

{chr(10).join(f"- {x}" for x in limitations)}

## Provenance and reproduction

Built on the simulator: **{"yes" if manifest["simulated"] else "no"}**.

`manifest.json` records the config (fingerprint `{manifest["config_fingerprint"]}`; no API
key, endpoint address or output folder), the seeds, model ids, prompt file hashes, package
versions, the funnel, token usage and the SHA-256 of every file in this folder. A rebuild from
the same config, prompts and response cache reproduces these files byte for byte; under another
run id only the `run_id` field of `manifest.json` differs. `prb release verify <folder>`
checks the checksums, the schema, this card's configs against the data, that no pair appears
twice and that `chosen` and `rejected` differ.

## Licence

Released under `{manifest["license"]}`. {_source_note(cfg["personas"]["source"])}
"""
    return (
        "---\n"
        + yaml.safe_dump(card_header(manifest, features), sort_keys=False)
        + "---\n\n"
        + body
    )
