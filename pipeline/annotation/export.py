"""`prb annotate export`: blinded batches for annotators, and the private key beside them.

Design (see annotation/README.md):
- kept pairs are shuffled with the annotation seed and cut into batches of `batch_size`;
- every item gets an opaque random id and a random A/B order; only the key says which is which;
- each batch adds known-answer gold items, alternating two kinds:
  `gold_identical` shows the same answer as A and B (expected: tie; an attention check), and
  `gold_offtopic` pairs a chosen answer with the chosen answer of a *different* question
  (expected: the on-topic one; any reader of the question can tell);
- `repeats_per_batch` pairs are shown a second time with A/B swapped, for self-consistency;
- batch b goes to K annotators taken round-robin from the pool, so consecutive batches share
  annotators (overlap) and every item of a batch is seen by all K of them.
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline import csvfile
from pipeline.annotation.layout import (
    CONTENT,
    CSV_COLUMNS,
    AnnotationError,
    annotation_dir,
    batches_dir,
    key_path,
    labels_lock,
    labels_path,
)
from pipeline.config import AnnotationConfig
from pipeline.errors import PrbError, safe_name
from pipeline.paths import DATA
from pipeline.records import AnnotationKey, AnnotationKeyItem, Pair, stable_id
from pipeline.store import StageFile, latest

CONFIG_FILES = ("GUIDELINES.md", "label_studio.xml", "argilla_settings.json")


@dataclass
class ExportSummary:
    batches: int
    items: int
    pairs: int
    gold: int
    repeats: int
    annotators: list[str]
    batches_dir: Path
    key_path: Path


def kept_pairs(filters: StageFile) -> list[Pair]:
    """The pairs the filters kept, from the filter stage's file (the caller finds it: see
    `stages.written`)."""
    if not filters.exists():
        raise AnnotationError(f"{filters.path}: no filters stage file; build the run first")
    current = latest(filters.read(), lambda f: f.pair.pair_id)  # a retried pair's last verdict
    pairs = sorted((f.pair for f in current if f.kept), key=lambda p: p.pair_id)
    if not pairs:
        raise AnnotationError(f"{filters.path}: no kept pairs to annotate")
    return pairs


def plan(
    pairs: list[Pair],
    run_id: str,
    cfg: AnnotationConfig,
    annotators: int,
    pool: list[str],
    export_id: str,
) -> AnnotationKey:
    """The whole export as a key: deterministic for the same pairs, seed, sizes and export id.
    Item ids are derived from the export id, so no two exports (of one run or of two runs with
    the same seed) share an item id, and a label can only ever land on its own export's item."""
    if len(pool) < annotators:
        raise AnnotationError(f"annotator pool has {len(pool)} ids, fewer than {annotators}")
    per_batch = min(cfg.batch_size, len(pairs))
    if cfg.gold_per_batch > per_batch:  # gold items check the annotators, never outnumber pairs
        raise AnnotationError(
            f"--gold {cfg.gold_per_batch}: more gold items than the {per_batch} pairs of a batch "
            f"({len(pairs)} pairs, batches of {cfg.batch_size}); give at most {per_batch}"
        )
    rng = random.Random(f"prb-annotation:{cfg.seed}")
    used: set[str] = set()

    def new_id() -> str:
        while (item_id := stable_id(export_id, rng.getrandbits(40), prefix="i", n=12)) in used:
            pass
        used.add(item_id)
        return item_id

    order = list(pairs)
    rng.shuffle(order)
    items: list[AnnotationKeyItem] = []
    assignments: dict[str, list[str]] = {}
    for b, start in enumerate(range(0, len(order), cfg.batch_size)):
        chunk = order[start : start + cfg.batch_size]
        batch_id = f"batch-{b + 1:03d}"
        assignments[batch_id] = [pool[(b + j) % len(pool)] for j in range(annotators)]
        batch = [
            AnnotationKeyItem(
                item_id=new_id(),
                batch_id=batch_id,
                pair_id=p.pair_id,
                kind="pair",
                a_is=rng.choice(["chosen", "rejected"]),
            )
            for p in chunk
        ]
        for orig in rng.sample(batch, min(cfg.repeats_per_batch, len(batch))):
            flipped = "rejected" if orig.a_is == "chosen" else "chosen"
            batch.append(
                orig.model_copy(
                    update={
                        "item_id": new_id(),
                        "kind": "repeat",
                        "a_is": flipped,
                        "repeat_of": orig.item_id,
                    }
                )
            )
        for g in range(cfg.gold_per_batch):
            source = rng.choice(chunk)
            others = [p for p in pairs if p.task.question_id != source.task.question_id]
            if g % 2 == 0 or not others:
                batch.append(
                    AnnotationKeyItem(
                        item_id=new_id(),
                        batch_id=batch_id,
                        pair_id=source.pair_id,
                        kind="gold_identical",
                        a_is="chosen",
                        expected="tie",
                    )
                )
            else:
                batch.append(
                    AnnotationKeyItem(
                        item_id=new_id(),
                        batch_id=batch_id,
                        pair_id=source.pair_id,
                        kind="gold_offtopic",
                        a_is=rng.choice(["chosen", "rejected"]),
                        expected="chosen",
                        offtopic_from=rng.choice(others).pair_id,
                    )
                )
        rng.shuffle(batch)
        items.extend(batch)
    return AnnotationKey(
        run_id=run_id, export_id=export_id, seed=cfg.seed, assignments=assignments, items=items
    )


def shown(item: AnnotationKeyItem, pairs: dict[str, Pair]) -> dict[str, str]:
    """What an annotator sees for one item: profile, question, answer A, answer B."""
    pair = pairs[item.pair_id]
    good = pair.chosen
    if item.kind == "gold_identical":
        bad = pair.chosen
    elif item.kind == "gold_offtopic":
        bad = pairs[item.offtopic_from].chosen
    else:
        bad = pair.rejected
    a, b = (good, bad) if item.a_is == "chosen" else (bad, good)
    profile = "\n".join(f"[{p.id}] {p.text}" for p in pair.task.persona.profile)
    return {"profile": profile, "question": pair.task.question, "answer_a": a, "answer_b": b}


def bound(key: AnnotationKey, item: AnnotationKeyItem) -> dict[str, str]:
    """What ties an exported item to its run and export: carried in every file, checked on
    import, so labels can never be applied to another run's pairs."""
    return {
        "run_id": key.run_id,
        "export_id": key.export_id,
        "item_id": item.item_id,
        "batch_id": item.batch_id,
    }


def label_studio_tasks(key: AnnotationKey, batch: list, pairs: dict[str, Pair]) -> list[dict]:
    return [{"data": {**bound(key, i), **shown(i, pairs)}} for i in batch]


def argilla_records(key: AnnotationKey, batch: list, pairs: dict[str, Pair]) -> list[dict]:
    # the shape of argilla's Record.to_dict / Record.from_dict (v2), ready for records.log
    return [{"id": i.item_id, "fields": shown(i, pairs), "metadata": bound(key, i)} for i in batch]


def csv_sheet(
    key: AnnotationKey, batch: list[AnnotationKeyItem], pairs: dict[str, Pair], annotator: str
) -> str:
    """One annotator's spreadsheet: the label columns to fill, then the item's content."""
    rows = []
    for i in batch:
        row = dict.fromkeys(CSV_COLUMNS, "") | {
            "export_id": key.export_id,
            "batch_id": i.batch_id,
            "item_id": i.item_id,
            "annotator_id": annotator,
        }
        rows.append([*row.values(), *shown(i, pairs).values()])
    return csvfile.dumps([*CSV_COLUMNS, *CONTENT], rows)


def export(
    filters: StageFile,
    run_id: str,
    cfg: AnnotationConfig,
    annotators: int,
    pool: list[str] | None = None,
    force: bool = False,
) -> ExportSummary:
    """Export the pairs `filters` (a run's filter stage file) kept; the batches and the key go
    in that run's folder."""
    run_dir = filters.path.parent
    with labels_lock(run_dir):  # no import may add labels while the export is replaced
        return _export(run_dir, filters, run_id, cfg, annotators, pool, force)


def _export(run_dir, filters, run_id, cfg, annotators, pool, force) -> ExportSummary:
    if labels_path(run_dir).exists() and labels_path(run_dir).stat().st_size:
        raise AnnotationError(
            f"{labels_path(run_dir)}: labels were already imported for this export; "
            "a new export would orphan them"
        )
    if key_path(run_dir).exists() and not force:
        raise AnnotationError(f"{key_path(run_dir)}: already exported (use --force to redo)")
    pool = pool or [f"annotator-{n + 1:02d}" for n in range(annotators)]
    for annotator in pool:  # an annotator id names that annotator's CSV file
        try:
            safe_name(annotator, "annotator id")
        except PrbError as e:
            raise AnnotationError(f"--pool: {e}") from None
    if len(set(pool)) != len(pool):
        raise AnnotationError(f"--pool: an annotator id is listed twice: {', '.join(pool)}")
    pairs = kept_pairs(filters)
    key = plan(pairs, run_id, cfg, annotators, pool, export_id=f"e{secrets.token_hex(6)}")
    by_id = {p.pair_id: p for p in pairs}

    root = annotation_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".export-"))
    try:
        out = tmp / "batches"
        for name in CONFIG_FILES:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(DATA / "annotation" / name, out / name)
        (out / "assignments.json").write_text(json.dumps(key.assignments, indent=2) + "\n")
        for batch_id, who in key.assignments.items():
            batch = [i for i in key.items if i.batch_id == batch_id]
            bdir = out / batch_id
            bdir.mkdir()
            _dump(bdir / "label_studio_tasks.json", label_studio_tasks(key, batch, by_id))
            _dump(bdir / "argilla_records.json", argilla_records(key, batch, by_id))
            for annotator in who:
                with open(bdir / f"{annotator}.csv", "w", encoding="utf-8", newline="") as f:
                    f.write(csv_sheet(key, batch, by_id, annotator))
        (tmp / "private").mkdir()
        (tmp / "private" / "key.json").write_text(key.model_dump_json(indent=1) + "\n")
        for name in ("batches", "private"):
            shutil.rmtree(root / name, ignore_errors=True)
            (tmp / name).rename(root / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    kinds = [i.kind for i in key.items]
    return ExportSummary(
        batches=len(key.assignments),
        items=len(key.items),
        pairs=kinds.count("pair"),
        gold=kinds.count("gold_identical") + kinds.count("gold_offtopic"),
        repeats=kinds.count("repeat"),
        annotators=sorted({a for who in key.assignments.values() for a in who}),
        batches_dir=batches_dir(run_dir),
        key_path=key_path(run_dir),
    )


def _dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
