"""What separates a pair (issue 17): model-free leakage probes, and `prb audit` / `prb eval` on
any release in the public schema, tested on two releases in the official hub layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import prb
from public_releases import controlled, leaky, write_hub_layout

from pipeline import probes
from pipeline.release.load import ReleaseError, load_rows


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("public")
    # 120 pairs each: the probes give no verdict from fewer than probes.MIN_VERDICT_PAIRS
    return {
        "controlled": write_hub_layout(root / "controlled", controlled(couples=20)),
        "leaky": write_hub_layout(root / "leaky", leaky(users=40)),
    }


def test_the_probes_flag_the_leaky_release_and_pass_the_controlled_one(releases):
    rows, info = load_rows(releases["controlled"])
    assert info["configs"] == ["Art_and_Entertainment", "Lifestyle_and_Personal_Development"]
    assert len(rows) == 120  # every config read: the card names no default
    fair = probes.summary(probes.run_all(rows))
    assert fair["verdict"] == "pass" and fair["leaks"] == []
    by_name = {p["name"]: p for p in fair["probes"]}
    assert by_name["length: longer wins"]["value"] == 0.5  # same length, every pair
    assert by_name["profile overlap"]["high"] <= 0.6
    # mirror pairs (one user's chosen is another's rejected) stay in one fold: the classifier
    # no longer learns a text with the opposite label and reads far below chance (was 0.32)
    clf = by_name["answer-only classifier"]
    assert clf["low"] <= 0.5 <= clf["high"], clf

    careless = probes.summary(probes.run_all(load_rows(releases["leaky"])[0]))
    assert careless["verdict"] == "leaky"
    assert {
        "length: longer wins",
        "length: median rejected/chosen ratio",
        "cue: hedges",
        "cue: second person",
        "answer-only classifier",
    } <= set(careless["leaks"])
    # profile overlap reads the user: a floor, reported as easy, never as a leak
    assert "profile overlap" not in careless["leaks"] and "profile overlap" in careless["easy_by"]
    clf = {p["name"]: p for p in careless["probes"]}["answer-only classifier"]
    assert clf["value"] >= 0.9 and clf["low"] > probes.THRESHOLD


def test_the_classifier_never_trains_and_tests_on_one_users_pairs():
    """Grouped folds: a release where each user's pairs share a private marker (the user's
    name in both answers' text, on the chosen side) would be solved by memorising users; the
    grouped classifier cannot, so it stays near chance."""
    rows = controlled()
    for r in rows:  # a per-user token on chosen only: learnable within a user, not across
        user = r["id"].split("-")[0]
        r["chosen"] = f"{r['chosen']} ({user})"
        r["rejected"] = f"{r['rejected']} ({user}x)"
    probe = probes.classifier_probe(rows)
    assert probe.value is not None and probe.low <= probes.THRESHOLD


def reference_out_of_fold(rows: list[dict], seed: int) -> list[float]:
    """The classifier as first written: both vectorisers fitted afresh on each fold's training
    answers. `out_of_fold` counts every text once and re-weighs per fold; it must not differ."""
    import numpy as np
    from scipy.sparse import csr_matrix, hstack, vstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    from pipeline.crossfit import groups
    from pipeline.cues import cues

    g = groups(rows, lambda r: r["user"])
    chosen, rejected = [r["chosen"] for r in rows], [r["rejected"] for r in rows]
    cue = np.asarray([list(cues(c).values()) for c in chosen]) - np.asarray(
        [list(cues(r).values()) for r in rejected]
    )
    cue = cue / (np.abs(cue).max(axis=0) + 1e-9)
    out = [0.5] * len(rows)
    folds = GroupKFold(min(5, len(set(g))), shuffle=True, random_state=seed)
    for train, test in folds.split(chosen, groups=g):
        vecs = [
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2),
            TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=2),
        ]
        for v in vecs:
            v.fit([chosen[i] for i in train] + [rejected[i] for i in train])

        def diff(idx, vecs=vecs):
            pick = lambda texts: [texts[i] for i in idx]  # noqa: E731
            parts = [v.transform(pick(chosen)) - v.transform(pick(rejected)) for v in vecs]
            return hstack([*parts, csr_matrix(cue[idx])]).tocsr()

        d = diff(train)
        y = np.r_[np.ones(len(train)), np.zeros(len(train))]
        fit = LogisticRegression(max_iter=2000, fit_intercept=False).fit(vstack([d, -d]), y)
        for i, p in zip(test, fit.predict_proba(diff(test))[:, 1], strict=True):
            out[i] = float(p)
    return out


def test_the_classifier_computes_its_features_once_and_decides_as_if_fitted_per_fold():
    """Issue 39: the gate's features are counted once per run and every fold and AFLite round
    reuses them; the probabilities equal the per-fold vectorisers' (a swapped answer's text
    appears twice, as one user's chosen and another's rejected: counted twice, as before)."""
    from pipeline.crossfit import Features, out_of_fold

    rows = [{**r, "user": r["id"].split("-")[0]} for r in leaky() + controlled()]
    # shared texts, as persona_swap writes them
    for a, b in zip(rows[:40:10], rows[45:85:10], strict=True):
        b["rejected"] = a["chosen"]
    for seed in (0, 1, 2):
        want = reference_out_of_fold(rows, seed)
        assert out_of_fold(rows, lambda r: r["user"], seed) == pytest.approx(want, abs=1e-12)
    # a subset by `take` (an AFLite round) scores as the subset's own features would
    alive = list(range(0, len(rows), 2))
    part = [rows[i] for i in alive]
    shared = out_of_fold(part, lambda r: r["user"], 4, features=Features(rows).take(alive))
    assert shared == pytest.approx(reference_out_of_fold(part, 4), abs=1e-12)
    assert len({round(p, 6) for p in shared}) > 10  # a real fit, not a constant


def test_the_classifier_fits_a_bounded_seeded_sample_and_scores_in_chunks(monkeypatch):
    """Issue 39: a fold fits at most MAX_TRAIN pairs (a seeded sample) and scores CHUNK pairs
    at a time, so its memory does not grow with the release; chunks change nothing."""
    from pipeline import crossfit as classifier

    rows = [{**r, "user": r["id"].split("-")[0]} for r in leaky() + controlled()]
    whole = classifier.out_of_fold(rows, lambda r: r["user"], 1)
    monkeypatch.setattr(classifier, "CHUNK", 7)
    assert classifier.out_of_fold(rows, lambda r: r["user"], 1) == whole
    monkeypatch.setattr(classifier, "MAX_TRAIN", 40)
    sampled = classifier.out_of_fold(rows, lambda r: r["user"], 1)
    assert sampled != whole and sampled == classifier.out_of_fold(rows, lambda r: r["user"], 1)
    leaky_ids = {r["id"] for r in leaky()}
    right = [p > 0.5 for r, p in zip(rows, sampled, strict=True) if r["id"] in leaky_ids]
    assert sum(right) / len(right) > 0.9  # 40 pairs still learn the planted cues


def test_prb_audit_reads_the_hub_layout_a_flat_file_and_hf_names(releases, tmp_path):
    out = tmp_path / "audit"
    done = prb("audit", str(releases["leaky"]), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "audit.json").read_text())
    assert report["probes"]["verdict"] == "leaky" and report["pairs"] == 120
    html = (out / "report.html").read_text()
    for p in report["probes"]["probes"]:
        assert p["name"] in html  # every probe in the report, with its plot
    for png in ("probes.png", "lengths.png"):
        assert (out / "plots" / png).read_bytes()[:4] == b"\x89PNG"
    assert "Verdict: leaky" in (out / "summary.md").read_text()

    flat = tmp_path / "controlled.jsonl"
    flat.write_text("\n".join(json.dumps(r) for r in controlled(couples=20)))
    done = prb("audit", str(flat), "--out", str(tmp_path / "flat"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "flat" / "audit.json").read_text())["probes"]["verdict"] == (
        "pass"
    )
    # hf:NAME goes through datasets' hub loader; offline, a local folder in the hub layout
    rows, info = load_rows(f"hf:{releases['controlled']}")
    assert len(rows) == 120 and info["layout"] == "hub"


def test_a_release_missing_a_public_column_is_one_line_naming_the_file_and_row(tmp_path):
    rows = controlled()
    del rows[3]["profile"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ReleaseError, match=r"bad.jsonl: row 'u\d\w+-q\d' lacks .*'profile'"):
        load_rows(bad)
    done = prb("audit", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "bad.jsonl" in done.stderr


def test_prb_eval_scores_every_config_of_a_release_without_a_default(releases, tmp_path):
    """It used to fail on the official layout with "Config name is missing"."""
    out = tmp_path / "eval"
    done = prb("eval", str(releases["leaky"]), "--out", str(out), "--bootstrap", "50", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    board = (out / "leaderboard.csv").read_text()
    assert "length/profile" in board and "overlap/profile" in board
    model = json.loads(next((out / "models").glob("length*.json")).read_text())
    assert set(model["metrics"]["per_category"]) == {
        "Art_and_Entertainment",
        "Lifestyle_and_Personal_Development",
    }
    assert model["metrics"]["accuracy"] == 1.0  # longer wins on the leaky release


def test_the_demo_simulator_writes_a_controlled_release_and_leaky_plants_the_cues(
    sim_factory, tmp_path
):
    """The simulator used to write chosen answers that echoed the profile and a rejected
    register of their own (overlap baseline 78%, classifier 100% on the demo): newcomers saw a
    leaky benchmark as the norm. With persona_swap every rejected answer is another user's
    chosen one; `--leaky` plants the cues on purpose in instructed rejected answers."""
    from conftest import build, write_config

    verdicts = {}
    for leak in (False, True):
        url = sim_factory(leaky=leak)
        mix = ["ignore_aspects", "wrong_tone"] if leak else ["persona_swap"]
        config = write_config(
            tmp_path / str(leak), url, personas={"per_category": 6}, generation={"strategies": mix}
        )
        rows = load_rows(Path(build(config)["release_dir"]))[0]
        # too few pairs for a verdict: read each probe's own interval instead
        verdicts[leak] = {p.name for p in probes.run_all(rows) if p.leak}
    assert not verdicts[False], verdicts[False]
    assert {"cue: hedges", "answer-only classifier"} <= verdicts[True]


def test_prb_eval_puts_each_judges_blind_variant_next_and_splits_by_position(releases, tmp_path):
    import pandas as pd

    out = tmp_path / "eval"
    done = prb(
        "eval",
        str(releases["controlled"]),
        "--sim",
        "--rm",
        "judge-pair",
        "--rm",
        "length",
        "--out",
        str(out),
        "--bootstrap",
        "50",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    board = pd.read_csv(out / "leaderboard.csv")
    models = list(board["model"])
    judge = models.index("judge-pair(model=prb-sim-1)/profile")
    assert models[judge + 1] == "judge-pair(model=prb-sim-1)/none"  # the blind one, next
    row = board.iloc[judge]
    assert row["needs_user"] == pytest.approx(
        row["accuracy"] - board.iloc[judge + 1]["accuracy"], abs=2e-4
    )  # 4 decimals in the CSV
    assert 0 <= row["chosen_as_a"] <= 1 and 0 <= row["chosen_as_b"] <= 1
    assert pd.isna(board.set_index("model").loc["length/profile", "chosen_as_a"])  # pointwise
    assert len(models) == 3  # no blind variant for a baseline
    # the terminal table shows both names whole (they used to be cut to the same prefix)
    assert "judge-pair(model=prb-sim-1)/profile" in done.stdout
    assert "judge-pair(model=prb-sim-1)/none" in done.stdout


def test_too_few_pairs_stop_a_pass_never_a_leak_their_interval_proves():
    """Issue 38: 48 pairs whose longer answer always wins and whose classifier reads ~1.0 are
    leaky, not "too few pairs"; the intervals stay honest at 0 and 1 (Wilson, not a bootstrap
    that collapses to 1.000-1.000); a ratio's point estimate alone flags nothing below 100."""
    rows = leaky(16)
    assert len(rows) < probes.MIN_VERDICT_PAIRS
    found = probes.summary(probes.run_all(rows))
    assert found["verdict"] == "leaky"
    assert {"length: longer wins", "answer-only classifier"} <= set(found["leaks"])
    by_name = {p["name"]: p for p in found["probes"]}
    longer = by_name["length: longer wins"]
    assert longer["value"] == 1.0 and longer["high"] == 1.0 and 0.9 < longer["low"] < 0.95
    assert longer["leak"] is True
    # the controlled release, cut below 100 pairs, proves nothing: no verdict
    few = probes.summary(probes.run_all(controlled()[:40]))
    assert few["verdict"] == "too few pairs" and few["leaks"] == []


def test_a_one_pair_release_has_no_nan_anywhere():
    rows = controlled()[:1]
    found = probes.summary(probes.run_all(rows))
    assert found["verdict"] == "too few pairs"
    json.dumps(found, allow_nan=False)  # NaN would raise: no "nan-nan" on a card
    ratio = {p["name"]: p for p in found["probes"]}["length: median rejected/chosen ratio"]
    assert ratio["low"] is None and ratio["leak"] is None
