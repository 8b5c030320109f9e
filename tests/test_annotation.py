"""Human annotation round trip: export -> labels in each tool's format -> import -> verdicts.

The simulated annotators below are the test's own: they read the private key (which a real
annotator never sees) to label truthfully, or ignore it to label carelessly.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from conftest import build, write_config
from typer.testing import CliRunner

from pipeline.annotation.export import export
from pipeline.annotation.importer import import_labels
from pipeline.annotation.layout import (
    CSV_COLUMNS,
    AnnotationError,
    batches_dir,
    key_path,
    labels_path,
    load_key,
    load_labels,
)
from pipeline.annotation.stats import summary, verdicts
from pipeline.cli import app
from pipeline.config import AnnotationConfig, load_config
from pipeline.errors import NothingReleased
from pipeline.records import AnnotationKeyItem, FilterRecord
from pipeline.stages import RunContext, stage
from pipeline.store import StageFile

ANNOTATORS = ["ann-1", "ann-2", "ann-3"]
# annotation required from the start: the first build releases nothing until labels come in
SMALL = {"personas": {"per_category": 2}, "annotation": {"required": True}}


@pytest.fixture(scope="module")
def built(tmp_path_factory, sim_url):
    """One small real build (simulator over HTTP, real Prefect); tests work on copies."""
    tmp = tmp_path_factory.mktemp("annot")
    config = write_config(tmp, sim_url, **SMALL)
    confirmed = r"annotation stage passed on none of its 6 records \(unlabelled 6\): annotation"
    with pytest.raises(NothingReleased, match=confirmed):
        build(config)  # every stage done; the release waits for human verdicts
    return tmp / "outputs", "demo"


@pytest.fixture
def run_copy(built, tmp_path, sim_url):
    """(run dir, config path) on a private copy of the built outputs, cache included."""
    outputs, run_id = built
    shutil.copytree(outputs, tmp_path / "outputs")
    config = write_config(tmp_path, sim_url, **SMALL)
    return tmp_path / "outputs" / run_id, config


def filters(run_dir):
    """The run's filter stage file, found as `prb annotate export` finds it."""
    from pipeline.records import FilterRecord
    from pipeline.stages import written

    return written(FilterRecord, run_dir)


def cfg(**changes) -> AnnotationConfig:
    return AnnotationConfig(
        **{"batch_size": 3, "gold_per_batch": 2, "repeats_per_batch": 1, **changes}
    )


# --- simulated annotators -------------------------------------------------------------------


def flip(side: str, a_is: str) -> str:
    """The letter (A/B) showing `side` ("chosen"/"rejected") for an item."""
    return "A" if side == a_is else "B"


def truthful(item: AnnotationKeyItem, annotator: str) -> dict:
    """Knows the truth: prefers chosen (the on-topic answer for off-topic gold), ties identical."""
    much = f"{flip('chosen', item.a_is)}_much_better"
    pref = "tie" if item.kind == "gold_identical" else much
    return label_values(pref, good="chosen", a_is=item.a_is)


def careless(item: AnnotationKeyItem, annotator: str) -> dict:
    """Always says A is slightly better, whatever A is."""
    return label_values("A_slightly_better", good="chosen", a_is=item.a_is)


def label_values(pref: str, good: str, a_is: str, reason: str = "Profile cue: budget.") -> dict:
    good_letter = "a" if a_is == good else "b"
    scores = {}
    for q in ("correct", "relevant", "helpful"):
        scores[f"{q}_a"] = 5 if good_letter == "a" else 4
        scores[f"{q}_b"] = 5 if good_letter == "b" else 4
    return {"preference": pref, **scores, "reason": "" if pref == "tie" else reason}


BEHAVIOUR = {"ann-1": truthful, "ann-2": truthful, "ann-3": careless}


def write_labels(run_dir: Path, fmt: str, out: Path, who=BEHAVIOUR, only=None) -> list[Path]:
    """Label every exported item, one file per batch in the given tool's export format."""
    key = load_key(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    everyone = who
    for batch_id, assigned in key.assignments.items():
        items = [i for i in key.items if i.batch_id == batch_id and (only is None or only(i))]
        if not items:
            continue
        who = {a: fn for a, fn in everyone.items() if a in assigned}  # as the tool would
        bdir = batches_dir(run_dir) / batch_id
        if fmt == "csv":
            path = out / f"{batch_id}.csv"
            rows = [
                {
                    "export_id": key.export_id,
                    "batch_id": batch_id,
                    "item_id": i.item_id,
                    "annotator_id": a,
                    "labelled_at": "2025-01-31T14:05:00Z",
                    **fn(i, a),
                }
                for a, fn in who.items()
                for i in items
            ]
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
            path.write_text(buf.getvalue())
        elif fmt == "label_studio":
            path = out / f"{batch_id}-ls.json"
            tasks = json.loads((bdir / "label_studio_tasks.json").read_text())
            wanted = {i.item_id: i for i in items}
            export = []
            for n, task in enumerate(tasks, 1):
                item = wanted.get(task["data"]["item_id"])
                anns = (
                    []
                    if item is None
                    else [
                        {
                            "id": 100 * n + k,
                            "completed_by": {"id": k, "email": a},
                            "created_at": "2025-01-31T14:05:00Z",
                            "was_cancelled": False,
                            "result": ls_result(fn(item, a)),
                        }
                        for k, (a, fn) in enumerate(who.items())
                    ]
                )
                export.append({"id": n, "data": task["data"], "annotations": anns})
            path.write_text(json.dumps(export))
        else:
            path = out / f"{batch_id}-argilla.json"
            records = json.loads((bdir / "argilla_records.json").read_text())
            wanted = {i.item_id: i for i in items}
            for rec in records:
                item = wanted.get(rec["metadata"]["item_id"])
                responses: dict[str, list] = {}
                for a, fn in ({} if item is None else who).items():
                    for q, v in fn(item, a).items():
                        responses.setdefault(q, []).append({"value": v, "user_id": a})
                rec["responses"] = responses
            path.write_text(json.dumps(records))
        files.append(path)
    return files


def ls_result(values: dict) -> list[dict]:
    out = [
        {
            "from_name": "preference",
            "to_name": "answer_a",
            "type": "choices",
            "value": {"choices": [values["preference"]]},
        }
    ]
    for name, v in values.items():
        if name[:-2] in ("correct", "relevant", "helpful"):
            out.append(
                {
                    "from_name": name,
                    "to_name": f"answer_{name[-1]}",
                    "type": "rating",
                    "value": {"rating": v},
                }
            )
    if values["reason"]:
        out.append(
            {
                "from_name": "reason",
                "to_name": "question",
                "type": "textarea",
                "value": {"text": [values["reason"]]},
            }
        )
    return out


# --- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "label_studio", "argilla"])
def test_round_trip_gives_verdicts(run_copy, tmp_path, fmt):
    run_dir, _ = run_copy
    s = export(filters(run_dir), "r", cfg(), annotators=3, pool=ANNOTATORS)
    key = load_key(run_dir)
    assert s.pairs == len({i.pair_id for i in key.items if i.kind == "pair"}) >= 4
    files = write_labels(run_dir, fmt, tmp_path)
    result = import_labels(run_dir, files)
    assert result.labels == 3 * len(key.items)

    labels = load_labels(run_dir)
    assert all(lab.imported_at and lab.annotator_id and lab.source for lab in labels)
    # Argilla's record export carries no response times; the other two formats do
    assert all(bool(lab.labelled_at) == (fmt != "argilla") for lab in labels)
    truth = [lab for lab in labels if lab.annotator_id != "ann-3" and lab.kind == "pair"]
    assert {lab.side for lab in truth} == {"chosen"}  # un-blinded through the key
    assert all(lab.scores_chosen["correct"] == 5 for lab in truth)
    assert all(lab.scores_rejected["correct"] == 4 for lab in truth)

    # 2 of 3 annotators prefer chosen on every pair: a strict majority, so all confirmed
    found = verdicts(cfg(), key, labels)
    assert {v.verdict for v in found.values()} == {"confirmed"}
    assert all(v.n_labels == 3 and v.chosen_votes >= 2 for v in found.values())

    # gold accuracy of the careless annotator, worked out from the key: identical gold needs a
    # tie (never given), off-topic gold is right only where A happened to be the on-topic answer
    gold = [i for i in key.items if i.expected]
    expected = sum(i.kind == "gold_offtopic" and i.a_is == "chosen" for i in gold)
    stats = summary(cfg(), key, labels)
    assert stats["gold_accuracy"]["ann-1"] == {"n": len(gold), "correct": len(gold), "accuracy": 1}
    assert stats["gold_accuracy"]["ann-3"]["correct"] == expected
    assert stats["self_consistency"]["ann-1"]["rate"] == 1.0
    # "always A" flips its side when A/B are swapped: never consistent on a repeat
    assert stats["self_consistency"]["ann-3"]["rate"] == 0.0
    assert all(p["complete_annotators"] == 3 for p in stats["progress"].values())

    # excluding the careless annotator leaves two who agree perfectly
    strict = summary(cfg(), key, labels, exclude_below=0.9)
    assert strict["excluded_annotators"] == ["ann-3"]
    assert strict["agreement"]["krippendorff_alpha_nominal"] is None  # one value: undefined
    assert strict["verdicts"] == {"confirmed": s.pairs}


def test_agreement_matches_hand_computation(run_copy, tmp_path):
    """Four pairs, three annotators, all through a CSV import. Labels, seen from chosen's side
    (c = chosen, t = tie, r = rejected; 5 = chosen much better ... 1 = rejected much better):

        pair  ann-1  ann-2  ann-3
        u1    c 5    c 5    c 4
        u2    c 5    c 4    r 2
        u3    c 4    t 3    t 3
        u4    r 1    r 2    c 4
    """
    run_dir, _ = run_copy
    export(filters(run_dir), "r", cfg(batch_size=50), annotators=3, pool=ANNOTATORS)
    key = load_key(run_dir)
    units = sorted((i for i in key.items if i.kind == "pair"), key=lambda i: i.pair_id)[:4]
    table = {"ann-1": [5, 5, 4, 1], "ann-2": [5, 4, 3, 2], "ann-3": [4, 2, 3, 4]}
    prefs = {
        5: ("chosen", "much"),
        4: ("chosen", "slightly"),
        3: ("tie", ""),
        2: ("rejected", "slightly"),
        1: ("rejected", "much"),
    }

    def scripted(item, annotator):
        side, strength = prefs[table[annotator][units.index(item)]]
        pref = "tie" if side == "tie" else f"{flip(side, item.a_is)}_{strength}_better"
        return label_values(pref, good="chosen", a_is=item.a_is)

    files = write_labels(
        run_dir, "csv", tmp_path, who=dict.fromkeys(ANNOTATORS, scripted), only=lambda i: i in units
    )
    import_labels(run_dir, files)
    ag = summary(cfg(), key, load_labels(run_dir))["agreement"]
    assert ag["units"] == 4 and ag["fleiss_units"] == 4 and ag["fleiss_raters"] == 3

    # Fleiss' kappa, n = 3 raters, N = 4 units; counts (c, t, r): u1 (3,0,0) u2 (2,0,1)
    # u3 (1,2,0) u4 (1,0,2). P_i = (sum n_ij^2 - 3) / 6 = 1, 1/3, 1/3, 1/3 -> P = 1/2.
    # p_j = 7/12, 2/12, 3/12 -> P_e = (49 + 4 + 9) / 144 = 62/144.
    # kappa = (72/144 - 62/144) / (82/144) = 10/82
    assert ag["fleiss_kappa"] == round(10 / 82, 4)

    # Krippendorff nominal: coincidences o_cc = 3 + 1 = 4, o_cr = o_rc = 2, o_ct = o_tc = 1,
    # o_tt = 1, o_rr = 1; n_c = 7, n_t = 2, n_r = 3, n = 12.
    # D_o = (2 + 2 + 1 + 1) / 12 = 1/2; D_e = 2 (7*2 + 7*3 + 2*3) / (12 * 11) = 82/132
    # alpha = 1 - (1/2) / (82/132) = 1 - 66/82 = 16/82
    assert ag["krippendorff_alpha_nominal"] == round(16 / 82, 4)

    # Krippendorff ordinal on 1..5: coincidences (each unit's pairs weighted 1/(3-1)):
    # o_55 = 1, o_54 = 1.5, o_52 = 0.5, o_44... -> n_1 = 1, n_2 = 2, n_3 = 2, n_4 = 4, n_5 = 3.
    # delta^2(c,k) = (n_c + ... + n_k - (n_c + n_k)/2)^2, e.g. (1,2) 2.25, (1,4) 42.25, (2,4) 25,
    # (2,5) 72.25, (3,4) 9, (4,5) 12.25, (1,3) 12.25, (1,5) 100, (2,3) 4, (3,5) 42.25.
    # observed: 2 (0.5*2.25 + 0.5*42.25 + 1*25 + 0.5*72.25 + 1*9 + 1.5*12.25) = 221.5
    # expected: 2 (2*2.25 + 2*12.25 + 4*42.25 + 3*100 + 4*4 + 8*25 + 6*72.25 + 8*9 + 6*42.25
    #              + 12*12.25) / 11 = 3240/11
    # alpha = 1 - 221.5 * 11 / 3240 = 803.5/3240
    assert ag["krippendorff_alpha_ordinal"] == round(803.5 / 3240, 4)

    # verdicts (min_labels 2; strict majority for chosen; ties count against):
    # u1 3 chosen -> confirmed; u2 2 of 3 -> confirmed; u3 1 of 3 -> refuted; u4 1 -> refuted
    found = verdicts(cfg(), key, load_labels(run_dir))
    assert [found[u.pair_id].verdict for u in units] == [
        "confirmed",
        "confirmed",
        "refuted",
        "refuted",
    ]
    assert (found[units[2].pair_id].tie_votes, found[units[2].pair_id].chosen_votes) == (2, 1)
    rest = [v for p, v in found.items() if p not in {u.pair_id for u in units}]
    assert {v.verdict for v in rest} == {"unlabelled"}


def test_key_never_reaches_annotator_files(run_copy):
    run_dir, _ = run_copy
    export(filters(run_dir), "r", cfg(), annotators=2, pool=ANNOTATORS)
    key = load_key(run_dir)
    facing = [p for p in batches_dir(run_dir).rglob("*") if p.is_file()]
    assert key_path(run_dir) not in facing and not key_path(run_dir).is_relative_to(
        batches_dir(run_dir)
    )
    pair_ids = {i.pair_id for i in key.items} | {i.offtopic_from for i in key.items}
    words = {"chosen", "rejected", "a_is", "gold", "repeat", "offtopic", "expected", "pair"}
    for path in facing:
        text = path.read_text()
        assert not [p for p in pair_ids if p and p in text], path
        if path.suffix == ".csv":
            rows = list(csv.DictReader(io.StringIO(text)))
            structure = set(rows[0]) | {v for r in rows for k, v in r.items() if k in CSV_COLUMNS}
        elif path.name.endswith(("_tasks.json", "_records.json")):
            structure = set()
            for rec in json.loads(text):
                meta = rec.get("data") or rec["metadata"]
                structure |= set(rec) | set(meta) | set(rec.get("fields", {}))
                structure |= {rec.get("id", ""), meta["item_id"], meta["batch_id"]}
        else:
            continue  # guidelines, configs and assignments: fixed text, no item data
        leaked = [w for w in words for s in structure if w in s.lower()]
        assert not leaked, f"{path} reveals {leaked}"
    assert len({len(i.item_id) for i in key.items}) == 1  # ids look alike whatever the kind
    # A/B really is shuffled; the same export seed gives the same layout, and a new export
    # gets a new export id and item ids that share nothing with the old ones
    assert {i.a_is for i in key.items if i.kind == "pair"} == {"chosen", "rejected"}
    export(filters(run_dir), "r", cfg(), annotators=2, pool=ANNOTATORS, force=True)
    again = load_key(run_dir)

    def layout(k):
        return [(i.batch_id, i.pair_id, i.kind, i.a_is) for i in k.items]

    assert layout(again) == layout(key) and again.assignments == key.assignments
    assert again.export_id != key.export_id
    assert not {i.item_id for i in again.items} & {i.item_id for i in key.items}
    # each batch goes to 2 of the 3 annotators, rotating: consecutive batches overlap
    who = list(key.assignments.values())
    assert all(len(w) == 2 for w in who) and (len(who) < 2 or set(who[0]) & set(who[1]))


def bad_csv(run_dir: Path, tmp_path: Path, change) -> Path:
    """A valid CSV of all labels, then `change(rows)` applied to make it bad."""
    good = write_labels(run_dir, "csv", tmp_path, who={"ann-1": truthful})
    rows = [r for f in good for r in csv.DictReader(f.open())]
    change(rows)
    path = tmp_path / "bad.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _set(i, **kv):
    return lambda rows: rows[i].update(kv)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set(-1, item_id="i0000000bad"), "i0000000bad (annotator ann-1): unknown item id"),
        (
            lambda rows: rows.append(dict(rows[1])),
            "duplicate label, already given in bad.csv row 3",
        ),
        (_set(0, helpful_b=""), "missing field helpful_b"),
        (_set(0, correct_a="7"), "correct_a must be an integer 1-5, got '7'"),
        (_set(0, preference="A_better"), "preference 'A_better' is not one of"),
        (_set(0, batch_id="batch-999"), "label for the wrong batch: file says batch-999"),
        (_set(0, annotator_id=""), "missing annotator id"),
    ],
    ids=["unknown", "duplicate", "missing", "range", "preference", "wrong-batch", "annotator"],
)
def test_bad_file_rejected_whole(run_copy, tmp_path, change, message):
    run_dir, _ = run_copy
    export(filters(run_dir), "r", cfg(), annotators=1, pool=ANNOTATORS)
    path = bad_csv(run_dir, tmp_path, change)
    with pytest.raises(AnnotationError) as err:
        import_labels(run_dir, [path])
    assert message in str(err.value) and "nothing imported" in str(err.value)
    assert not labels_path(run_dir).exists()  # every other, valid, row was held back too


def test_reason_required_unless_tie_and_wrong_batch_in_json(run_copy, tmp_path):
    run_dir, _ = run_copy
    export(filters(run_dir), "r", cfg(), annotators=1, pool=ANNOTATORS)
    key = load_key(run_dir)
    target = next(i for i in key.items if i.kind == "pair")

    def no_reason(item, a):
        v = truthful(item, a)
        return {**v, "reason": ""} if item.item_id == target.item_id else v

    (ls_file,) = write_labels(
        run_dir,
        "label_studio",
        tmp_path,
        {"ann-1": no_reason},
        only=lambda i: i.batch_id == target.batch_id,
    )
    with pytest.raises(AnnotationError, match=f"item {target.item_id} .*missing field reason"):
        import_labels(run_dir, [ls_file])
    (ar_file,) = write_labels(
        run_dir,
        "argilla",
        tmp_path,
        {"ann-1": truthful},
        only=lambda i: i.batch_id == target.batch_id,
    )
    records = json.loads(ar_file.read_text())
    records[0]["metadata"]["batch_id"] = "batch-000"
    ar_file.write_text(json.dumps(records))
    with pytest.raises(AnnotationError, match="wrong batch: file says batch-000"):
        import_labels(run_dir, [ar_file])
    assert not labels_path(run_dir).exists()


def test_cli_and_release_gating(run_copy, tmp_path):
    """prb annotate export/import/status, then a rebuild with annotation required releases only
    confirmed pairs and records the statistics in manifest and card."""
    run_dir, config = run_copy
    runner = CliRunner()
    out = runner.invoke(
        app,
        [
            "annotate",
            "export",
            str(run_dir),
            "--batch-size",
            "3",
            "--annotators",
            "3",
            "--pool",
            ",".join(ANNOTATORS),
        ],
    )
    assert out.exit_code == 0, out.output
    key = load_key(run_dir)

    # the careless annotator alone decides nothing; one pair gets only one label: insufficient
    lonely = sorted(i.pair_id for i in key.items if i.kind == "pair")[0]
    files = write_labels(run_dir, "argilla", tmp_path, only=lambda i: i.pair_id != lonely)
    extra = write_labels(
        run_dir,
        "csv",
        tmp_path,
        who={"ann-1": truthful},
        only=lambda i: i.pair_id == lonely and i.kind == "pair",
    )
    bad = runner.invoke(
        app, ["annotate", "import", str(run_dir), *map(str, files), str(extra[0]), str(extra[0])]
    )
    assert bad.exit_code == 2 and "duplicate label" in bad.output
    assert not labels_path(run_dir).exists()
    ok = runner.invoke(app, ["annotate", "import", str(run_dir), *map(str, files), str(extra[0])])
    assert ok.exit_code == 0, ok.output
    status = runner.invoke(app, ["annotate", "status", str(run_dir), "--json"])
    figures = json.loads(status.output)
    assert figures["verdicts"]["insufficient"] == 1

    result = build(config)
    kept = [f for f in StageFile(run_dir, "filters", FilterRecord).read() if f.kept]
    confirmed = len(kept) - 1
    assert result["funnel"]["released"] == confirmed
    release = Path(result["release_dir"])
    manifest = json.loads((release / "manifest.json").read_text())
    block = manifest["annotation"]
    assert block["required"] is True and block["exported"] is True
    assert block["verdicts"] == {
        "confirmed": confirmed,
        "refuted": 0,
        "insufficient": 1,
        "unlabelled": 0,
    }
    assert block["agreement"]["units"] == confirmed
    assert block["gold_accuracy"]["ann-1"]["accuracy"] == 1.0
    card = (release / "README.md").read_text()
    assert "Krippendorff's alpha" in card and "| `ann-3` |" in card
    rows = [json.loads(line) for line in (run_dir / "annotation.jsonl").read_text().splitlines()]
    assert {r["pair_id"] for r in rows if r["verdict"] == "insufficient"} == {lonely}
    # the stage also works without a build around it
    ctx = RunContext(load_config(config), run_dir)
    report = asyncio.run(stage("annotation").run(ctx, kept))
    assert len(report.output) == len(kept)
    assert report.kept == sum(r["verdict"] == "confirmed" for r in rows)  # required: confirmed


def test_releasable_rule():
    from pipeline.annotation.verdicts import releasable
    from pipeline.config import RunConfig
    from pipeline.records import AnnotationRecord

    verdicts_ = ("confirmed", "refuted", "insufficient", "unlabelled")
    for required, allowed in ((True, {"confirmed"}), (False, set(verdicts_) - {"refuted"})):
        run = RunConfig(annotation={"required": required})
        got = {v for v in verdicts_ if releasable(run, AnnotationRecord(pair_id="p", verdict=v))}
        assert got == allowed, required


# --- labels can only land on their own run's export (issue 14) --------------------------------


def test_labels_of_another_run_are_refused(built, tmp_path):
    """Two runs with the same seed: their exports share no item id, and a file labelled for one
    is refused by the other, naming the file and its first foreign item."""
    outputs, run_id = built
    runs = {}
    for name in ("a", "b"):
        shutil.copytree(outputs, tmp_path / name / "outputs")
        runs[name] = tmp_path / name / "outputs" / run_id
        export(filters(runs[name]), run_id, cfg(), annotators=2, pool=ANNOTATORS)
    key_a, key_b = load_key(runs["a"]), load_key(runs["b"])
    assert key_a.export_id != key_b.export_id
    assert not {i.item_id for i in key_a.items} & {i.item_id for i in key_b.items}
    for fmt in ("csv", "label_studio", "argilla"):
        files = write_labels(runs["a"], fmt, tmp_path / "a", who={"ann-1": truthful})
        with pytest.raises(AnnotationError) as err:
            import_labels(runs["b"], files)
        first = files[0].read_text()
        message = str(err.value)
        assert str(files[0]) in message and key_a.export_id in message
        assert key_b.export_id in message and "import each file into the run" in message
        foreign = message.split(": item ")[1].split()[0]
        assert foreign in first and foreign in {i.item_id for i in key_a.items}
        assert not labels_path(runs["b"]).exists()
    # a tool that dropped the export id: the item ids alone still cannot match another export
    rows = [
        r
        for f in write_labels(runs["a"], "csv", tmp_path / "a2", who={"ann-1": truthful})
        for r in csv.DictReader(f.open())
    ]
    for r in rows:
        r["export_id"] = ""
    path = tmp_path / "stripped.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(AnnotationError, match="unknown item id, not in this run's export"):
        import_labels(runs["b"], [path])
    import_labels(runs["a"], files)  # and into its own run it goes
    assert len(load_labels(runs["a"])) == len(rows)


def test_labels_from_an_annotator_not_assigned_to_the_batch_are_refused(run_copy, tmp_path):
    run_dir, _ = run_copy
    export(filters(run_dir), "r", cfg(), annotators=1, pool=["ann-1", "ann-2"])
    key = load_key(run_dir)
    first_batch = next(iter(key.assignments))
    assert key.assignments[first_batch] == ["ann-1"]
    files = write_labels(run_dir, "csv", tmp_path, who={"ann-1": truthful})
    rows = list(csv.DictReader(files[0].open()))
    rows[0]["annotator_id"] = "ann-2"  # ann-2 labels a batch that is not theirs
    with files[0].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(
        AnnotationError, match=f"annotator 'ann-2' is not assigned to {first_batch}"
    ):
        import_labels(run_dir, files)
    assert not labels_path(run_dir).exists()


def test_unsafe_annotator_ids_are_refused(run_copy):
    run_dir, _ = run_copy
    with pytest.raises(AnnotationError, match=r"annotator id '\.\./x' is not a safe name"):
        export(filters(run_dir), "r", cfg(), annotators=1, pool=["../x"])
    assert not (run_dir.parent / "x.csv").exists() and not key_path(run_dir).exists()


def test_imports_started_together_all_count(run_copy, tmp_path):
    """Six `prb annotate import` processes at once, each with its own files: every label lands
    (it used to keep whichever import wrote last: 42 of 70)."""
    import subprocess
    import sys

    run_dir, _ = run_copy
    export(filters(run_dir), "r", cfg(batch_size=2), annotators=3, pool=ANNOTATORS)
    files = []
    for a in ANNOTATORS:
        files += write_labels(run_dir, "csv", tmp_path / a, who={a: BEHAVIOUR[a]})
    groups = [files[i::6] for i in range(6)]
    assert all(groups)
    expected = sum(len(list(csv.DictReader(f.open()))) for f in files)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline.cli",
                "annotate",
                "import",
                str(run_dir),
                *map(str, group),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for group in groups
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len(load_labels(run_dir)) == expected


def test_more_gold_items_than_pairs_in_a_batch_is_refused(run_copy):
    """`--gold 1000` on 6 pairs made nearly every item gold, silently (issue 48)."""
    from pipeline.annotation.export import kept_pairs, plan

    run_dir, _ = run_copy
    pairs = kept_pairs(filters(run_dir))
    with pytest.raises(
        AnnotationError, match=f"--gold 1000: more gold items than the {len(pairs)}"
    ):
        plan(pairs, "demo", cfg(batch_size=50, gold_per_batch=1000), 1, ["a"], "e1")
    assert plan(pairs, "demo", cfg(batch_size=50, gold_per_batch=len(pairs)), 1, ["a"], "e1")
