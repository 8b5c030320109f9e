"""The dataset card (README.md) of a release, rendered from its manifest alone (through the
template pipeline/templates/card.md.j2), so the card can say nothing the manifest does not
record. The YAML header is what `datasets` and the Hub read: one config per category plus `all`,
each with its features and row count. The funnel's words come from the stages, the thresholds'
and the check columns' from the checks, the other columns' from the schema.
"""

from __future__ import annotations

import math

import datasets
import jinja2
import yaml

from pipeline import strategies
from pipeline.annotation.verdicts import card_section as annotation_card
from pipeline.checks import CHECKS, setting_names
from pipeline.paths import TEMPLATES
from pipeline.release.manifest import Manifest
from pipeline.release.schema import COLUMN_DOCS, FEATURES
from pipeline.reports import md


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


RECIPES = {
    "prb": "prb's own: a content plan shared by both answers, then `chosen` following every "
    "aspect and `rejected` with the same key points missing them by a named strategy; the "
    "automatic filters dropped every pair that failed a check.",
    "published": "the published Personalized RewardBench recipe: both answers written straight "
    "from the question, the user's posts and their aspects (`chosen` from the aspects the user "
    "expects, `rejected` from the same aspects as ones to avoid), no content plan. The "
    "automatic checks ran in record-only mode: no pair was dropped for failing one, and the "
    "`would_drop` column lists what each would have dropped.",
}


def recipe_note(cfg: dict) -> str:
    """The card's words for how this release was made: the recipe and what it changed."""
    recipe = cfg.get("recipe", "prb")
    lines = [f"Recipe: **`{recipe}`**, {RECIPES.get(recipe, 'a custom recipe.')}"]
    rubrics = cfg.get("rubrics", {}).get("source", "planner")
    lines.append(
        {
            "planner": "Rubric aspects: derived by the planner model from each profile.",
            "imported": "Rubric aspects: the users' own, as imported (no planner call).",
            "both": "Rubric aspects: the users' own, as imported; the planner's are recorded "
            "beside them in the build, with how many of the imported ones it found.",
            "stated": "Rubric aspects: each user's own preference statements, in their words "
            "(no planner call; the planner for a user who stated none).",
        }[rubrics]
    )
    generation = cfg.get("generation", {})
    if generation.get("design") == "rewrite":
        dims = ", ".join(generation.get("dimensions", []))
        lines.append(
            "Answers: one shared base answer per pair, rewritten twice: `chosen` for the user, "
            "`rejected` for a contrasting user of the same category, one instruction per "
            f"dimension on which the two differ (of: {dims}), with each user's own words. A pair "
            "is released only if at least one intended difference shows in the text, read "
            "model-free (each answer naming its own user's level in the words that level shows, "
            "prose against a list, depth by length, expertise by explained terms)."
        )
        lines.append(
            "Selected by, evaluated by: the pairs were selected by that model-free reading "
            "alone (pipeline/realised.py; no model judged fit). The probes below are model-free "
            "too; `prb audit RELEASE --position-free` asks a judge, which selected nothing, "
            "whether each answer fits its user, a contrasting user and no user."
        )
    profile = cfg.get("profile", {})
    if profile.get("top_k"):
        how = "a dense retriever" if profile.get("dense_model") else "BM25"
        lines.append(
            f"Profile: the {profile['top_k']} posts most relevant to the question (ranked by "
            f"{how}) went into the prompts; the `profile` column holds every post."
        )
    if cfg.get("filters", {}).get("mode") == "record":
        lines.append(
            "Not filtered: pairs that the checks would have dropped are released; do not read "
            "this release as checked for equal quality."
        )
    return "\n".join(f"- {x}" for x in lines)


def card_header(manifest: Manifest, features: datasets.Features = FEATURES) -> dict:
    counts, sizes = manifest.per_category, manifest.num_bytes
    configs = [("all", "*/test-*.parquet", sum(counts.values()), sum(sizes.values()))] + [
        (c, f"{c}/test-00000-of-00001.parquet", n, sizes[c]) for c, n in counts.items()
    ]
    feature_yaml = datasets.DatasetInfo(features=features)._to_yaml_dict()["features"]
    return {
        "pretty_name": "Personalized RewardBench (prb build)",
        "license": manifest.license,
        "language": ["en"],
        "task_categories": ["text-classification"],
        "tags": ["reward-modeling", "personalization", "preference-pairs"]
        + (["simulated"] if manifest.simulated else []),
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


def _limitations(manifest: Manifest, smallest: int, total: int) -> list[str]:
    out = [
        "The personas are synthetic and curated. Their profile items imply preferences but do "
        "not cover every preference dimension for every user.",
        "The automatic judges can share the generator's blind spots. The persona-blind check and "
        "human annotation reduce that risk but do not remove it.",
        "Each user has one question and one pair. Results therefore say how a reward model "
        "treats these users, not how it treats a population.",
    ]
    if smallest:
        noise = round(100 * 1.96 * 0.5 / math.sqrt(smallest))
        out.append(
            f"The smallest config has {smallest} pairs, so an accuracy measured on it is "
            f"uncertain by about ±{noise} points (95% interval at 50% accuracy)."
        )
    unlabelled = manifest.stats["verdicts_released"].get("unlabelled", 0)
    if unlabelled:
        out.append(
            f"{unlabelled} of {total} released pairs have no human verdict yet; for those, the "
            "automatic filters alone decided that `chosen` fits the user better."
        )
    if manifest.simulated:
        out.append(
            "This build is simulated: its texts are template output and its scores are synthetic."
        )
    return out


def validity_md(found: dict) -> str:
    """The probes' families as the card shows them: each probe with its value, interval and n."""
    if not found:
        return "Too few pairs to probe."
    head = {
        "too few pairs": f"No verdict: {found['pairs']} pairs, and a verdict needs at least "
        f"{found['min_pairs']} (the intervals are too wide to fail a probe).",
        "pass": "Verdict: **pass**: nothing but the user separates `chosen` from `rejected`.",
        "leaky": "Verdict: **leaky**: an answer-only rule tells `chosen` from `rejected`.",
        "easy": "Verdict: **easy**: no leak, but matching the user's words wins.",
    }
    out = [head.get(found["verdict"], found["verdict"])]
    if found.get("sample"):
        s = found["sample"]
        out.append(
            f"The probes read a seeded sample of {s['pairs']:,} of the {s['of']:,} released "
            f"pairs (the {s['pairs']:,} with the smallest sha256 of `{s['seed']}:<id>`), so "
            "each figure's n is the sample's; `prb audit` on the release reads every pair."
        )
    for fam in found["families"]:
        rows = [
            [
                p["name"],
                "n/a" if p["value"] is None else f"{p['value']:.3f}",
                "" if p["low"] is None else f"{p['low']:.3f}–{p['high']:.3f}",
                p["n"],
                fam["flag"].upper() if p["leak"] else "",
            ]
            for p in fam["probes"]
        ]
        out += [
            f"**{fam['title']}** ({fam['rule']})",
            _table(["probe", "value", "95% interval", "pairs", "flag"], rows),
        ]
    if found.get("judges"):
        rows = [
            [j["label"], j["text"], j["pairs"], "OUT OF LINE" if j["warn"] else ""]
            for j in found["judges"]
        ]
        out += [
            "**Judges**: the build's own judges on the released pairs (the filters kept "
            "these pairs by what the judges said, so this is a selected sample; `prb audit "
            "RELEASE --judge` asks judges about any release)",
            _table(["figure", "value", "pairs", "flag"], rows),
        ]
    return "\n\n".join(out)


def qualification_md(found: dict) -> str:
    """The judge's qualification as the card shows it."""
    if not found:
        return "The judge was not qualified on this build (`qualification.enabled: false`)."
    if found.get("passed") is None:
        why = found.get("why") or (
            f"{found['failed_calls']} of {found['calls']} calibration calls failed at the endpoint"
        )
        skipped = (
            " No judge check ran (`filters.judges: qualified`)."
            if found.get("judges_skipped")
            else ""
        )
        return (
            f"The judge `{found['judge_model']}` could not be qualified on this build: "
            f"{why}.{skipped}"
        )
    p, c, t = found["prefers_sound"], found["consistent"], found["thresholds"]

    def rate(r: dict) -> str:  # a rate no verdict went into (failed calls) reads "–"
        return f"{r['value']:.0%} ({r['k']}/{r['n']})" if r["n"] else "–"

    rows = [
        [kind, rate(r["prefers_sound"]), rate(r["consistent"])]
        for kind, r in found["by_corruption"].items()
    ]
    verdict = (
        "It **failed** the thresholds and the build went on only because it was told to "
        "(`--accept-weak-judge`): this release was filtered by a weak judge."
        if found.get("accepted_weak")
        else "It passed."
    )
    if found.get("judges_skipped"):
        verdict = (
            "It did not pass, so **no judge check ran** (`filters.judges: qualified`): "
            "the pairs were filtered by the model-free checks (the quality floor, the "
            "artifact gate, length and similarity) alone, and no judge's verdict is in "
            "this release."
        )
    return "\n\n".join(
        filter(
            None,
            [
                f"Before the filters ran, the judge `{found['judge_model']}` compared "
                f"{found['answers']} sound answers from this build with corrupted copies of "
                f"themselves ({found['items']} items, both A/B orders: {found['calls']} calls). "
                f"It preferred the sound answer in {p['value']:.0%} of {p['n']} verdicts "
                f"[{p['low']:.0%}, {p['high']:.0%}] (threshold {t['min_prefers_sound']:.0%}) and "
                f"gave the same verdict in both orders on {c['value']:.0%} of {c['n']} items "
                f"[{c['low']:.0%}, {c['high']:.0%}] (threshold {t['min_consistent']:.0%}). "
                f"{verdict}",
                _table(
                    ["corruption", "prefers the sound answer", "same verdict in both orders"], rows
                ),
                position_free_md(found.get("position_free"), t),
            ],
        )
    )


def position_free_md(found: dict | None, t: dict) -> str:
    """The position-free judge's rates on the same items, when it was asked."""
    if not found:
        return ""
    p = found["prefers_sound"]
    if not p["n"]:
        return (
            f"The position-free judge (`{found['task']}`) gave no usable answer "
            f"({found['failed_calls']} of {found['calls']} calls failed)."
        )
    kinds = ", ".join(
        f"{k} {r['value']:.0%} ({r['k']}/{r['n']})"
        for k, r in found["by_corruption"].items()
        if r["n"]
    )
    verdict = "would pass" if found["passed"] else "would fail"
    return (
        f"Beside it, the position-free judge (`{found['task']}`: each answer asked alone, "
        f"P(yes) from the logprobs, {found['calls']} calls) scored the sound answer higher "
        f"on {p['value']:.0%} of {p['n']} items [{p['low']:.0%}, {p['high']:.0%}]; it "
        f"{verdict} the {t['min_prefers_sound']:.0%} threshold (by corruption: {kinds}). "
        "The filters' judges are pairwise, so the build's verdict is the pairwise judge's."
    )


def method_words(manifest: Manifest) -> dict[str, object]:
    """How this build was made, in the words the funnel rows and the template fill in."""
    cfg = manifest.config
    required = manifest.annotation.get("required", cfg["annotation"]["required"])
    return {
        "seed": manifest.seeds["run"],
        "per_category": cfg["personas"]["per_category"] or "every user",
        "budget": cfg["generation"]["word_budget"],
        "required": "required" if required else "not required",
        "profile_selection": f"; its {cfg['profile']['top_k']} posts most relevant to the "
        "question kept for the prompts"
        if cfg.get("profile", {}).get("top_k")
        else "",
        "generation": "a content plan shared by both answers, then `chosen` (follows every "
        "aspect) and `rejected` (same key points, one named strategy that misses them)"
        if cfg["generation"].get("content_plan", True)
        else "`chosen` from the aspects the user expects and `rejected` from the same aspects "
        "as ones to avoid, no content plan",
        "kept": "pairs that passed every automatic check (thresholds below)"
        if cfg["filters"].get("mode", "drop") == "drop"
        else "every pair: the checks only recorded what they would drop (`would_drop`)",
    }


def funnel_md(manifest: Manifest, about: dict[str, str], fmt: dict) -> str:
    """The funnel as a table: each step's count, what it dropped and, from `about` (the
    stages' own words), what happened there."""
    funnel_rows, prev = [], None
    for i, step in enumerate(manifest.funnel, 1):
        dropped = "" if prev is None else prev - step.count
        doc = about.get(step.stage, "").format(**fmt)
        funnel_rows.append([i, f"`{step.stage}`", step.count, dropped, doc])
        prev = step.count
    return _table(["step", "stage", "count", "dropped", "what happened"], funnel_rows)


def render_card(
    manifest: Manifest, about: dict[str, str], features: datasets.Features = FEATURES
) -> str:
    """`about`: each funnel row's words, from the stages that made the release."""
    cfg, stats, counts = manifest.config, manifest.stats, manifest.per_category
    total = sum(counts.values())
    fmt = method_words(manifest)
    reasons = manifest.drop_reasons
    docs = {k: v for c in CHECKS for k, v in c.report.docs.items()}
    thresholds = [k for k in setting_names() if k in cfg["filters"]]
    variables = {
        "name": md(manifest.name),  # foreign: `<script>` or a link stays text
        "sim_note": (
            "> **Simulated build.** Every answer and judgement in this release comes from prb's "
            "bundled deterministic simulator, not from a language model. It demonstrates and tests "
            "the pipeline; do not use it to rank reward models.\n\n"
            if manifest.simulated
            else ""
        ),
        "mean_words": stats["mean_words"],
        "sizes_md": _table(
            ["config", "pairs (split `test`)"],
            [["`all` (default)", total]] + [[f"`{c}`", n] for c, n in counts.items()],
        ),
        "first_config": next(iter(counts), "all"),
        "columns_md": _table(
            ["column", "meaning"], [[f"`{c}`", COLUMN_DOCS.get(c, "")] for c in features]
        ),
        "funnel_md": funnel_md(manifest, about, fmt),
        "reasons_md": _table(["reason", "records"], [[f"`{k}`", v] for k, v in reasons.items()])
        if reasons
        else "No record was dropped.",
        "strategies": "; ".join(
            f"`{k}` {v} ({strategies.about(k)})" for k, v in stats["rejected_strategies"].items()
        )
        or "none",
        "validity_md": validity_md(manifest.validity),
        "qualification_md": qualification_md(manifest.judge_qualification),
        "generator": manifest.models["generator"],
        "judge": manifest.models["judge"],
        "model_seed": manifest.seeds["model"],
        "prompts_md": _table(
            ["task", "version", "file SHA-256 (first 12)"],
            [
                [f"`{t}`", p["version"], f"`{p['sha256'][:12]}`"]
                for t, p in manifest.prompts.items()
            ],
        ),
        "thresholds_md": _table(
            ["setting", "rule", "value"],
            [[f"`{k}`", docs.get(k, ""), cfg["filters"][k]] for k in thresholds],
        ),
        "required": fmt["required"],
        "verdicts": ", ".join(f"`{k}` {v}" for k, v in stats["verdicts_released"].items())
        or "none",
        "annotation_md": annotation_card(manifest.annotation),
        "limitations_md": "\n".join(
            f"- {x}" for x in _limitations(manifest, min(counts.values(), default=0), total)
        ),
        "simulated": manifest.simulated,
        "fingerprint": manifest.config_fingerprint,
        "license": manifest.license,
        "source_note": _source_note(cfg["personas"]["source"]),
        "recipe_md": recipe_note(cfg),
    }
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown, not HTML
    )
    body = env.get_template("card.md.j2").render(**variables)
    return (
        "---\n"
        + yaml.safe_dump(card_header(manifest, features), sort_keys=False)
        + "---\n\n"
        + body
    )
