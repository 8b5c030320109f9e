"""`prb audit` and `prb show` on real runs built against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config
from statsmodels.stats.proportion import proportion_confint
from typer.testing import CliRunner

from pipeline.audit.report import write_report
from pipeline.cli import app
from pipeline.errors import NothingReleased

PNG = b"\x89PNG\r\n\x1a\n"
SECTIONS = ["warnings", "funnel", "checks", "breakdowns", "worst"]
MD_HEADINGS = [
    "## Warnings",
    "## Funnel",
    "## What separates the pairs, check by check",
    "## Breakdowns",
    "### By rejected strategy",
    "### By category",
    "## Worst pairs",
]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, sim_url):
    tmp = tmp_path_factory.mktemp("audit")
    result = build(write_config(tmp, sim_url, personas={"per_category": 3}))
    return Path(result["run_dir"]), result


def test_report_has_every_section_and_plot(clean_run):
    run_dir, result = clean_run
    out = write_report(run_dir)
    assert out == run_dir / "audit"
    html = (out / "report.html").read_text()
    for section in SECTIONS:
        assert f'<h2 id="{section}">' in html, section
    md = (out / "summary.md").read_text()
    for heading in MD_HEADINGS:
        assert heading in md, heading
    for plot in ("funnel", "check_quality", "check_length_ratio", "breakdowns"):
        png = out / "plots" / f"{plot}.png"
        assert png.read_bytes()[:8] == PNG and png.stat().st_size > 5000, plot
        assert f'src="plots/{plot}.png"' in html
    report = json.loads((out / "audit.json").read_text())
    # worst pairs link to their records, which are the filters.jsonl records themselves
    filters = {r["pair"]["pair_id"]: r for r in lines(run_dir / "filters.jsonl")}
    assert 0 < len(report["worst"]) <= 9
    for w in report["worst"]:
        assert f'href="{w["link"]}"' in html and f"]({w['link']})" in md
        assert json.loads((out / w["link"]).read_text()) == filters[w["pair_id"]]
    severities = [w["severity"] for w in report["worst"]]
    assert severities == sorted(severities, reverse=True)


def test_report_figures_match_the_run_files(clean_run):
    run_dir, result = clean_run
    report = json.loads((write_report(run_dir) / "audit.json").read_text())
    funnel = {f["stage"]: f["count"] for f in report["funnel"]}
    for stage, name in (("personas", "personas"), ("questions", "questions"), ("pairs", "pairs")):
        assert funnel[stage] == len(lines(run_dir / f"{name}.jsonl"))
    assert funnel == {k: v for k, v in result["funnel"].items() if k in funnel}
    # blind accuracy recomputed independently from the records: decisive verdicts naming chosen
    records = lines(run_dir / "filters.jsonl")
    judged = [r["checks"]["blind"] for r in records if "blind" in r["checks"]]
    verdicts = [(b["ab"], "A") for b in judged] + [(b["ba"], "B") for b in judged]
    decisive = [(v, c) for v, c in verdicts if v != "tie"]
    k = sum(v == c for v, c in decisive)
    found = {f["key"]: f for f in report["figures"]["all judged"]}
    blind = found["blind"]
    assert (blind["k"], blind["n"], blind["pairs"]) == (k, len(decisive), len(judged))
    if decisive:
        lo, hi = proportion_confint(k, len(decisive), method="wilson")
        assert [blind["low"], blind["high"]] == [round(lo, 4), round(hi, 4)]
    ratios = sorted(r["checks"]["length_ratio"]["ratio"] for r in records)
    assert found["length_ratio"]["value"] == round(ratios[len(ratios) // 2], 4)
    # each check's figures come from its declaration: the quality judge's two sides
    quality = [r["checks"]["quality"] for r in records if r["checks"].get("quality")]
    chosen = [
        sum(q["chosen"][c] for c in ("correctness", "relevance", "helpfulness")) / 3
        for q in quality
        if q["chosen"] and q["rejected"]
    ]
    assert found["quality"]["chosen"] == round(sum(chosen) / len(chosen), 4)
    strategies = {row["strategy"]: row["pairs"] for row in report["by_strategy"]}
    assert sum(strategies.values()) == len(records)
    assert {row["category"] for row in report["by_category"]} == {
        r["pair"]["task"]["category"] for r in records
    }


def test_warnings_when_quality_leaks(tmp_path, sim_factory):
    url = sim_factory(degrade_rate=1.0)
    with pytest.raises(NothingReleased, match="the filters stage passed on none of its 6 records"):
        # the auditing mode: every check on every pair, so the blind judge sees the leaks too
        build(
            write_config(
                tmp_path, url, personas={"per_category": 2}, filters={"evaluate_all": True}
            )
        )
    run_dir = tmp_path / "outputs" / "demo"  # nothing released, every stage file written
    report = json.loads((write_report(run_dir) / "audit.json").read_text())
    text = "\n".join(report["warnings"])
    assert "interval excludes 50.0%" in text and "median length ratio" in text
    assert {f["key"]: f for f in report["figures"]["all judged"]}["blind"]["value"] == 1.0
    md = (run_dir / "audit" / "summary.md").read_text()
    assert "**WARNING** persona-blind judge" in md
    assert 'class="warn"' in (run_dir / "audit" / "report.html").read_text()


def test_cli_audit_and_show(clean_run):
    run_dir, _ = clean_run
    runner = CliRunner()
    audited = runner.invoke(app, ["audit", str(run_dir)])
    assert audited.exit_code == 0, audited.output
    assert "## Funnel" in audited.output and "report.html" in audited.output
    assert "Null test" not in audited.output  # only when asked: it costs N times the probes
    nulled = runner.invoke(app, ["audit", str(run_dir), "--null", "3"])
    assert nulled.exit_code == 0 and "Null test: 3 copies relabelled" in nulled.output
    null = json.loads((run_dir / "audit" / "audit.json").read_text())["probes"]["null"]
    assert null["runs"] == 3 and {q["runs"] for q in null["probes"]} == {3}
    assert all(1 / 4 <= q["p"] <= 1 for q in null["probes"])  # (1 + k) / (N + 1)

    record = next(r for r in lines(run_dir / "filters.jsonl") if r["kept"])  # every check ran
    pair_id = record["pair"]["pair_id"]
    shown = runner.invoke(app, ["show", pair_id, "--run", str(run_dir), "--json"])
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.output)
    assert info["pair"]["task"]["persona"]["profile"]
    assert info["pair"]["rubric_aspects"] == record["pair"]["rubric_aspects"]
    calls = {c["name"]: c for c in info["calls"]}
    assert list(calls)[:4] == ["planner", "content_plan", "chosen", "rejected"]
    assert set(calls) >= set(record["calls"])
    for name in record["calls"]:
        c = calls[name]
        assert c["messages"][0]["role"] == "system" and c["raw"]
    assert calls["blind_ab"]["parsed"]["choice"] == record["checks"]["blind"]["ab"]
    assert calls["blind_ba"]["parsed"]["choice"] == record["checks"]["blind"]["ba"]
    assert (
        calls["quality_rejected"]["parsed"]["helpfulness"]
        == record["checks"]["quality"]["rejected"]["helpfulness"]
    )
    assert record["pair"]["rejected"] in calls["blind_ab"]["messages"][1]["content"]

    pretty = runner.invoke(app, ["show", pair_id, "--run", str(run_dir)])
    assert pretty.exit_code == 0, pretty.output
    flat = " ".join(pretty.output.split())  # rich wraps long lines to the terminal width
    assert record["pair"]["task"]["question"] in flat
    assert "blind_ba" in pretty.output and "raw answer" in pretty.output

    missing = runner.invoke(app, ["show", "prb-0000000000000000", "--run", str(run_dir)])
    assert missing.exit_code == 2 and "no pair" in missing.output
    bad = runner.invoke(app, ["audit", str(run_dir / "nope")])
    assert bad.exit_code == 2


def test_a_judge_the_endpoint_does_not_serve_is_refused_before_any_call(clean_run, sim_url):
    """`prb audit --base-url` caches the judge's answers under its model name; a server that
    ignores the name answers any, so a forgotten --model cached the 1.5B's verdicts as the
    config's judge (stop 56). A judge the endpoint does not list is refused in one line."""
    import httpx

    run_dir, result = clean_run
    release = str(Path(result["release_dir"]))
    asked = lambda: httpx.get(sim_url.removesuffix("/v1") + "/stats").json()["requests"]  # noqa: E731
    before = asked()
    runner = CliRunner()
    refused = runner.invoke(
        app,
        [
            "audit",
            release,
            "--position-free",
            "--base-url",
            sim_url,
            "--model",
            "qwen-7b",
            "--out",
            str(run_dir.parent / "refused"),
        ],
    )
    assert refused.exit_code == 2
    said = refused.output.strip().splitlines()
    assert len(said) == 1 and "serves prb-sim-1" in said[0] and "'qwen-7b'" in said[0]
    assert "Traceback" not in refused.output and asked() == before
