"""Judge qualification (issue 26): before the filters trust a judge, it must tell sound answers
from corrupted copies of themselves, in both A/B orders. A weak judge (the simulator's
`--judge random` or `always_a`) stops the build before the filters with one line; with
--accept-weak-judge the build goes on and the release says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import NothingReleased
from pipeline.qualification import FILE, degenerate, items, rates, shuffled, truncated
from pipeline.release.card import qualification_md


def test_the_corruptions_break_an_answer_the_way_they_say():
    sound = "In plain terms, start small.\n- Walk daily.\n- Sleep early.\n- Eat well."
    cut = truncated(sound)
    assert sound.startswith(cut) and len(cut.split()) < len(sound.split())
    assert not cut.endswith((".", "!", "?"))  # mid-sentence
    back = shuffled(sound)
    assert back.splitlines()[0] == "- Eat well." and sorted(back.splitlines()) == sorted(
        sound.splitlines()
    )
    assert shuffled("One sentence only") is None
    assert degenerate(sound).splitlines() == ["In plain terms, start small."] * 6


def test_rates_count_picks_of_the_sound_answer_and_agreement_across_orders():
    # (verdict with the sound answer as A, verdict with it as B)
    found = rates([("A", "B"), ("A", "A"), ("tie", "tie"), ("B", "A")])
    assert (found["prefers_sound"]["k"], found["prefers_sound"]["n"]) == (3, 8)
    assert (found["consistent"]["k"], found["consistent"]["n"]) == (3, 4)  # A/A is position
    assert found["prefers_sound"]["low"] < 3 / 8 < found["prefers_sound"]["high"]
    # a failed call counts in neither rate; an item with one failed order has no consistency
    half = rates([("A", None), (None, "B")])
    assert (half["prefers_sound"]["k"], half["prefers_sound"]["n"]) == (2, 2)
    assert half["consistent"]["n"] == 0 and half["consistent"]["value"] is None
    card = qualification_md(
        {
            "judge_model": "j",
            "answers": 1,
            "items": 2,
            "calls": 4,
            "passed": True,
            "prefers_sound": half["prefers_sound"],
            "consistent": found["consistent"],
            "by_corruption": {"truncated": half},
            "thresholds": {"min_prefers_sound": 0.75, "min_consistent": 0.7},
        }
    )
    assert "| truncated | 100% (2/2) | – |" in card


@pytest.mark.parametrize("judge", ["always_a", "random"])
def test_a_weak_judge_stops_the_build_before_the_filters(tmp_path, sim_factory, judge):
    config = write_config(tmp_path, sim_factory(judge=judge))
    result = CliRunner().invoke(app, ["build", "--config", str(config)])
    assert result.exit_code == 9, result.output
    line = result.output.strip()
    assert line.startswith("error: the judge prb-sim-1 prefers the sound answer in")
    assert "\n" not in line and "--accept-weak-judge" in line
    run_dir = tmp_path / "outputs" / "demo"
    found = json.loads((run_dir / FILE).read_text())
    assert not found["passed"] and found["calls"] == 2 * found["items"] >= 48
    assert found["prefers_sound"]["value"] < 0.75 or found["consistent"]["value"] < 0.7
    # stopped before the filters judged anything; what the earlier stages made is kept
    assert not (run_dir / "filters.jsonl").exists() or not (run_dir / "filters.jsonl").read_text()
    assert (run_dir / "pairs.jsonl").read_text().count("\n") == 24


def test_accept_weak_judge_builds_on_and_the_release_says_so(tmp_path, sim_factory):
    config = write_config(tmp_path, sim_factory(judge="always_a"))
    assert CliRunner().invoke(app, ["build", "--config", str(config)]).exit_code == 9
    # the same run, resumed with the flag: the fingerprint allows it, no pair is made again
    result = CliRunner().invoke(app, ["build", "--config", str(config), "--accept-weak-judge"])
    assert result.exit_code == 0, result.output
    release = tmp_path / "outputs" / "demo" / "release"
    q = json.loads((release / "manifest.json").read_text())["judge_qualification"]
    assert q["accepted_weak"] and not q["passed"] and q["consistent"]["value"] == 0.0
    assert "keys" not in q
    card = (release / "README.md").read_text()
    assert "this release was filtered by a weak judge" in card


def test_a_sound_judge_qualifies_and_the_card_shows_its_rates(tmp_path, sim_url):
    result = build(write_config(tmp_path, sim_url))
    release = Path(result["release_dir"])
    manifest = json.loads((release / "manifest.json").read_text())
    q = manifest["judge_qualification"]
    assert q["passed"] and not q["accepted_weak"]
    assert q["prefers_sound"]["value"] >= 0.9 and q["consistent"]["value"] >= 0.9
    assert set(q["by_corruption"]) == {"truncated", "shuffled", "off_question", "degenerate"}
    assert q["answers"] == 8 and q["calls"] == 2 * q["items"]
    card = (release / "README.md").read_text()
    assert "## The judge's qualification" in card and "It passed." in card


def test_a_run_with_too_few_sound_answers_says_the_judge_was_not_qualified(tmp_path, sim_factory):
    """A weak generator's run: the floor leaves no two sound answers to make a calibration set
    of. The judge is not taken as qualified, and the card says why."""
    config = write_config(tmp_path, sim_factory(degenerate_rate=1.0), personas={"per_category": 1})
    with pytest.raises(NothingReleased):  # every pair degenerate: nothing reaches a judge
        build(config)
    found = json.loads((tmp_path / "outputs" / "demo" / FILE).read_text())
    assert found["passed"] is None and found["calls"] == 0 and "quality floor" in found["why"]
    assert "could not be qualified" in qualification_md(found)


def test_judges_qualified_builds_a_weak_judges_run_with_no_judge_call(tmp_path, sim_factory):
    """`filters.judges: qualified` (a small local model): a judge that fails qualification does
    not stop the build and decides nothing. No judge check runs, every record says so, the
    funnel and the card say no judge filtered the release, and the position-free judge's rates
    are recorded beside the pairwise judge's."""
    config = write_config(
        tmp_path,
        sim_factory(judge="always_a"),
        filters={"judges": "qualified"},
        qualification={"position_free": True},
    )
    result = build(config)
    run_dir = Path(result["run_dir"])
    records = [json.loads(x) for x in (run_dir / "filters.jsonl").read_text().splitlines()]
    judges = {"quality", "adherence", "blind"}
    assert records and result["funnel"]["released"] > 0
    for r in records:
        assert not judges & set(r["checks"]) and not r["calls"]
        assert judges <= set(r["skipped"])
    usage = result["usage"]["filters"]
    found = json.loads((run_dir / FILE).read_text())
    assert found["passed"] is False and found["judges_skipped"] and not found["accepted_weak"]
    # only qualification asked the judge: both orders of each item, and each answer once alone
    free = found["position_free"]
    assert usage["calls"] == found["calls"] + free["calls"]
    assert free["calls"] < 2 * found["items"]  # a sound answer is asked once for 4 items
    # the simulator's pointwise judge is sound while its pairwise one says "A"
    assert free["prefers_sound"]["value"] >= 0.9 and free["passed"]
    funnel = json.loads((run_dir / "funnel.json").read_text())
    row = next(r for r in funnel if r["stage"] == "filters_kept")
    assert row["changed"] == {"not judged (the judge did not qualify)": len(records)}
    card = (Path(result["release_dir"]) / "README.md").read_text()
    assert "**no judge check ran**" in card and "position-free judge" in card
    assert "filtered by a weak judge" not in card


def test_judges_qualified_runs_the_judges_of_a_judge_that_qualified(tmp_path, sim_url):
    result = build(write_config(tmp_path, sim_url, filters={"judges": "qualified"}))
    records = [
        json.loads(x) for x in (Path(result["run_dir"]) / "filters.jsonl").read_text().splitlines()
    ]
    assert any("quality" in r["checks"] for r in records)
    assert not any(
        "skipped" in r and "quality" in r["skipped"] and not r["reasons"] for r in records
    )
    found = json.loads((Path(result["run_dir"]) / FILE).read_text())
    assert found["passed"] and "judges_skipped" not in found


def test_the_calibration_answers_are_chosen_without_holding_the_runs_pairs(tmp_path, sim_url):
    """Issue 39: choosing the calibration answers sorted every pair of the run by id in memory
    (at 50,001 personas 0.85 GiB: the filters stage's peak). Now ids and offsets are sorted
    and the pairs read back one at a time; the same answers are picked."""
    import tracemalloc

    from pipeline.stages import stage
    from pipeline.store import Records

    result = build(write_config(tmp_path, sim_url))
    run_dir = Path(result["release_dir"]).parent
    pairs = stage("pairs")
    path = pairs.file(run_dir).path
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    pad = " and so on" * 20_000  # 200 KB a pair, where no calibration item copies it
    path.write_text(
        "".join(json.dumps({**r, "rejected": r["rejected"] + pad}) + "\n" for r in rows)
    )
    records = Records(pairs.file(run_dir), pairs.output_id)
    assert len(records) >= 20
    tracemalloc.start()
    try:
        picked = items(records, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert picked and picked == items(list(records), 2)
    assert peak < 5 * len(pad), peak  # a few pairs at a time, not all of them
