"""Only personal fit separates the pairs (issue 30): the leakage probes are unbiased (the null
test), the artifact gate drops what an answer-only model reads before any judge sees it, and
persona_swap pairs carry nothing an answer-only model can read. On real simulator builds of
~300 pairs (every library persona, three questions)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import build, write_config

from pipeline import probes
from pipeline.release.load import load_rows

INSTRUCTED = ["ignore_aspects", "wrong_expertise", "wrong_format", "wrong_tone"]


def big(tmp: Path, url: str, **changes) -> dict:
    return build(
        write_config(
            tmp, url, personas={"per_category": None, "questions_per_persona": 3}, **changes
        )
    )


@pytest.fixture(scope="module")
def instructed(tmp_path_factory, sim_url):
    """Today's four instruction strategies: the simulator's rejected answers open with other
    styles' sentences, which an answer-only model learns (a real leak, ~0.8)."""
    tmp = tmp_path_factory.mktemp("instructed")
    gated = big(
        tmp / "gated", sim_url, generation={"strategies": INSTRUCTED, "rewrite_artifacts": False}
    )
    plain = big(
        tmp / "plain",
        sim_url,
        generation={"strategies": INSTRUCTED},
        filters={"artifact_gate": False},
    )
    return gated, plain


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory, sim_url):
    """The same construction with the gate's first half on: leaking pairs are rewritten."""
    tmp = tmp_path_factory.mktemp("rewritten")
    return big(tmp, sim_url, generation={"strategies": INSTRUCTED})


def test_the_answer_only_probes_read_chance_on_a_release_relabelled_at_random(instructed, tmp_path):
    """`prb audit --null 20`: on 20 copies relabelled by a fair coin per pair every
    answer-only probe averages 0.5 and its interval excludes 0.5 at most twice; the real
    classifier's reading is beyond every copy (p = 1/21)."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    _, plain = instructed
    rows = load_rows(Path(plain["release_dir"]))[0]
    assert len(rows) >= 250
    out = tmp_path / "audit"
    result = CliRunner().invoke(
        app, ["audit", plain["release_dir"], "--null", "20", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "audit.json").read_text())["probes"]
    found = {q["name"]: q for q in report["null"]["probes"]}
    assert "answer-only classifier" in found and len(found) >= 7
    for name, q in found.items():
        assert q["runs"] == 20 and abs(q["mean"] - 0.5) <= 0.02, (name, q["mean"])
        assert q["excluded"] <= 2 and not q["narrow"], (name, q["excluded"])
    classifier = found["answer-only classifier"]
    assert classifier["observed"] > probes.THRESHOLD and classifier["p"] == pytest.approx(1 / 21)
    assert "Null test: 20 copies relabelled" in (out / "summary.md").read_text()
    assert "Null test: 20 copies relabelled" in (out / "report.html").read_text()


def test_the_artifact_gate_drops_what_an_answer_only_model_reads_before_any_judge(instructed):
    gated, plain = instructed
    run_dir = Path(gated["run_dir"])
    records = [json.loads(x) for x in (run_dir / "filters.jsonl").read_text().splitlines()]
    dropped = [r for r in records if "artifact" in r["reasons"]]
    assert 0 < len(dropped) <= 0.25 * len(records) + 1
    for r in records:  # every pair records its out-of-fold probability
        assert 0 <= r["checks"]["artifact"]["probability"] <= 1
    for r in dropped:  # confidently read, and never sent to a judge
        assert r["checks"]["artifact"]["probability"] >= 0.75
        assert r["checks"]["artifact"]["round"] >= 1
        assert {"quality", "adherence", "blind"} <= set(r["skipped"])
    funnel = json.loads((run_dir / "funnel.json").read_text())
    assert any(row.get("reasons", {}).get("artifact") == len(dropped) for row in funnel)
    # the released pairs carry their probability, below every dropped one of the same round;
    # what the classifier reads went down (here only a little: on this build nearly every
    # pair leaks, and the gate drops at most a quarter; persona_swap is the cure for that)
    rows = load_rows(Path(gated["release_dir"]))[0]
    kept = [r["pair_checks"]["artifact_probability"] for r in rows]
    assert None not in kept and statistics.fmean(kept) < min(
        r["checks"]["artifact"]["probability"] for r in dropped
    )
    before = probes.classifier_probe(load_rows(Path(plain["release_dir"]))[0])
    assert probes.classifier_probe(rows).value < before.value
    # resumable: the same decisions, nothing asked again
    again = build(Path(gated["run_dir"]).parent.parent / "config.yaml")
    assert again["funnel"] == gated["funnel"]
    assert len((run_dir / "filters.jsonl").read_text().splitlines()) == len(records)


def test_persona_swap_pairs_carry_nothing_an_answer_only_model_reads(tmp_path, sim_url):
    result = big(tmp_path, sim_url, generation={"strategies": ["persona_swap"]})
    rows = load_rows(Path(result["release_dir"]))[0]
    assert len(rows) >= 250 and {r["rejected_strategy"] for r in rows} == {"persona_swap"}
    # mutual couples: the user a rejected answer was written for has this user as its contrast
    partner = {r["persona_id"]: r["rejected_for"] for r in rows}
    assert all(partner.get(b, a) == a for a, b in partner.items())
    found = probes.summary(probes.run_all(rows))
    assert found["verdict"] == "pass", (found["leaks"], found["easy_by"])
    clf = {p["name"]: p for p in found["probes"]}["answer-only classifier"]
    assert clf["low"] <= 0.5 <= clf["high"], clf


def latest_pairs(run_dir: Path) -> dict[str, dict]:
    out = {}
    for line in (run_dir / "pairs.jsonl").read_text().splitlines():
        p = json.loads(line)
        out[p["task"]["task_id"]] = p
    return out


def test_the_gate_rewrites_a_leaking_rejected_answer_by_persona_swap_before_any_judge(
    instructed, rewritten
):
    _, plain = instructed
    run_dir = Path(rewritten["run_dir"])
    lines = (run_dir / "pairs.jsonl").read_text().splitlines()
    pairs = latest_pairs(run_dir)
    done = [p for p in pairs.values() if p["rewritten"] is not None]
    assert len(done) >= 0.5 * len(pairs)  # nearly every instructed pair leaks here
    picked = {p["task"]["persona"]["persona_id"] for p in done if p["rewritten"]["round"]}
    for p in done:  # the first answer and the gate's reading of it stay on the pair
        assert p["rewritten"]["strategy"] in INSTRUCTED and p["rejected_strategy"] == "persona_swap"
        assert p["rejected_for"] and p["rejected"] != p["rewritten"]["rejected"]
        if p["rewritten"]["round"]:  # read confidently; else its user's couple was
            assert p["rewritten"]["probability"] >= 0.75
        else:
            assert {p["task"]["persona"]["persona_id"], p["rejected_for"]} & picked
        assert p["calls"]["first_rejected"] != p["calls"]["rejected"]
    funnel = {r["stage"]: r for r in json.loads((run_dir / "funnel.json").read_text())}
    assert sum(funnel["pairs"]["changed"].values()) == len(done)
    rows = load_rows(Path(rewritten["release_dir"]))[0]
    shown = {r["id"]: r["pair_checks"]["artifact_rewritten_from"] for r in rows}
    assert {r["id"] for r in rows if shown[r["id"]]} == {
        p["pair_id"] for p in done if p["pair_id"] in shown
    }
    # what was a leak is no longer read: the release passes where the plain one is leaky
    before = probes.classifier_probe(load_rows(Path(plain["release_dir"]))[0])
    after = probes.classifier_probe(rows)
    assert before.low > probes.THRESHOLD and after.high <= 0.60, (before, after)
    # resumable: a rerun decides alike and writes no line
    again = build(run_dir.parent.parent / "config.yaml")
    assert again["funnel"] == rewritten["funnel"]
    assert (run_dir / "pairs.jsonl").read_text().splitlines() == lines


def test_the_validity_builds_releases_verify(instructed, rewritten):
    """A release is verified by the code that wrote it (issue 48)."""
    from pipeline.release.publish import verify

    for result in (*instructed, rewritten):
        assert verify(Path(result["release_dir"])) == []
