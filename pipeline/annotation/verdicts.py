"""Verdicts from human labels: which pairs a build may release, and what the manifest and card
say about the labels. The human loop itself is `export` (blinded batches), `importer` (labels
back, checked whole), `stats` (agreement, gold, verdicts); pipeline/stages/annotation.py turns
imported labels into verdicts on every build.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.annotation.layout import labels_path, load_key, load_labels
from pipeline.annotation.stats import summary
from pipeline.config import RunConfig
from pipeline.records import AnnotationRecord


def releasable(cfg: RunConfig, record: AnnotationRecord) -> bool:
    """Required: only confirmed pairs. Not required: human labels can only veto (refuted)."""
    if cfg.annotation.required:
        return record.verdict == "confirmed"
    return record.verdict != "refuted"


def manifest_block(cfg: RunConfig, run_dir: Path, records: list[AnnotationRecord]) -> dict:
    """Annotation statistics for the release manifest and card: no times, no annotator names
    beyond their ids, so that the same labels give byte-identical release files."""
    counts = {v: 0 for v in ("confirmed", "refuted", "insufficient", "unlabelled")}
    for r in records:
        counts[r.verdict] += 1
    block = {
        "required": cfg.annotation.required,
        "min_labels": cfg.annotation.min_labels,
        "min_quality": cfg.annotation.min_quality,
        "exclude_below": cfg.annotation.exclude_below,
        "tie_rule": TIE_RULE,
        "verdicts": counts,
        "exported": False,
    }
    key = load_key(run_dir)
    if key is not None:
        block["exported"] = True
        stats = summary(cfg.annotation, key, load_labels(run_dir))
        stats.pop("verdicts")  # counted above over the kept pairs of this build
        block.update(stats)
        block["labels_file"] = str(labels_path(run_dir).relative_to(run_dir))
    return block


TIE_RULE = (
    "one vote per annotator per pair (the first showing; repeats only measure consistency); "
    "confirmed needs at least min_labels votes, a strict majority for chosen and a mean human "
    "quality score of at least min_quality for both answers; anything else, including a tied "
    "vote, is refuted"
)


def card_section(block: dict | None) -> str:
    """Markdown for the dataset card: how the human labels came out (empty if none exported)."""
    if not block or not block.get("exported"):
        return "No batch was exported for human annotation in this build."
    ag = {k: "n/a" if v is None else v for k, v in block["agreement"].items()}
    gold = block["gold_accuracy"]
    cons = block["self_consistency"]
    rows = [
        f"| `{a}` | {_pct(gold.get(a), 'accuracy')} | {_pct(cons.get(a), 'rate')} | "
        f"{'yes' if a in block['excluded_annotators'] else ''} |"
        for a in block["annotators"]
    ]
    items = block["items"]
    return "\n".join(
        [
            f"Exported: {block['batches']} batch(es) of {items['pair']} pairs, "
            f"{items['gold_identical'] + items['gold_offtopic']} gold items and "
            f"{items['repeat']} repeated items (seed {block['seed']}); "
            f"{block['labels']} labels from {len(block['annotators'])} annotators.",
            "",
            "Verdicts over the kept pairs: "
            + ", ".join(f"`{k}` {v}" for k, v in block["verdicts"].items())
            + f". Rule: {block['tie_rule']} (min_labels {block['min_labels']}, "
            f"min_quality {block['min_quality']}).",
            "",
            f"Agreement on the preference over {ag['units']} pairs: Krippendorff's alpha "
            f"{ag['krippendorff_alpha_ordinal']} (ordinal, five-point scale) and "
            f"{ag['krippendorff_alpha_nominal']} (nominal, direction); Fleiss' kappa "
            f"{ag['fleiss_kappa']} ({ag['fleiss_units']} pairs with {ag['fleiss_raters']} raters).",
            "",
            "| annotator | gold accuracy | self-consistency | excluded |",
            "|---|---|---|---|",
            *rows,
        ]
    )


def _pct(stat: dict | None, field: str) -> str:
    return "-" if not stat else f"{stat[field]:.2f} (n={stat['n']})"
