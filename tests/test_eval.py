"""`prb eval`: accuracy and CIs, baselines, LLM judges against the simulator, the HF adapter on a
tiny local model, Best-of-N and its correlation figures. Releases here are tiny Parquet files
written with `datasets`, laid out as a real release."""

from __future__ import annotations

import asyncio
import json
import math

import datasets
import httpx
import numpy as np
import pandas as pd
import pytest
from conftest import write_config
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import ModelConfig
from pipeline.eval.bon import CandidatesError, correlation, load_candidates
from pipeline.eval.evaluate import ReleaseError, evaluate, load_release
from pipeline.eval.models import parse_spec
from pipeline.eval.rewards import SpecError, user_context
from pipeline.llm import LLM
from pipeline.llm.cache import ResponseCache
from pipeline.stats import bootstrap

CATS = ("Art_and_Entertainment", "Society_and_Culture")
POINTS = "Start with one small project. Practise a little every week. Ask a teacher for feedback."


def row(i: int, category: str, chosen: str, rejected: str, **extra) -> dict:
    return {
        "id": f"p{i:03d}",
        "question": extra.get("question", f"How do I get started with pottery, take {i}?"),
        "profile": extra.get("profile", [{"id": f"u{i}-p1", "category": category, "text": "Hi."}]),
        "rubric_aspects": extra.get(
            "aspects", [{"aspect": "Be concise", "evidence": f"[u{i}-p1]", "reason": "said so"}]
        ),
        "narrative": extra.get("narrative", "The user wants a concise answer."),
        "category": category,
        "chosen": chosen,
        "rejected": rejected,
    }


def write_release(root, rows) -> str:
    """The release layout: <category>/test-00000-of-00001.parquet (split `test`)."""
    for cat in sorted({r["category"] for r in rows}):
        path = root / cat / "test-00000-of-00001.parquet"
        path.parent.mkdir(parents=True)
        datasets.Dataset.from_list([r for r in rows if r["category"] == cat]).to_parquet(str(path))
    return str(root)


def length_rows() -> list[dict]:
    """Category A: chosen longer in 15 of 20; category B: longer in 4 of 10, one equal length."""
    short, long = "word " * 10, "word " * 14
    rows = [row(i, CATS[0], long, short) for i in range(15)]
    rows += [row(i, CATS[0], short, long) for i in range(15, 20)]
    rows += [row(i, CATS[1], long, short) for i in range(20, 24)]
    rows += [row(i, CATS[1], short, long) for i in range(24, 29)]
    rows.append(row(29, CATS[1], "same " * 10, "word " * 10))
    return rows


def run(coro):
    return asyncio.run(coro)


def test_longer_wins_accuracy_ties_and_length_bias(tmp_path):
    release = write_release(tmp_path / "release", length_rows())
    rm = parse_spec("length", llm=None, judge_model="", context="none")
    rows, [res] = run(evaluate(release, [rm], n_resamples=500, seed=1))
    m = res["metrics"]
    assert len(rows) == 30 and m["n"] == 30
    assert m["accuracy"] == pytest.approx(19 / 30)  # the equal-length pair is a tie: lost
    assert m["per_category"][CATS[0]]["accuracy"] == pytest.approx(15 / 20)
    assert m["per_category"][CATS[1]]["accuracy"] == pytest.approx(4 / 10)
    assert m["ties"] == 1 and m["errors"] == 0
    assert m["longer_preferred"] == 1.0
    assert m["ci_low"] < m["accuracy"] < m["ci_high"]
    by_id = {p["id"]: p for p in res["pairs"]}
    assert by_id["p000"]["score_chosen"] == 14 and by_id["p000"]["score_rejected"] == 10
    assert by_id["p029"]["won"] is False


def test_the_one_bootstrap_matches_an_independent_bootstrap():
    won = np.array([1.0] * 130 + [0.0] * 70)  # accuracy 0.65, n = 200
    lo, hi = bootstrap(won, seed=3, n_resamples=4000)
    rng = np.random.default_rng(11)
    means = won[rng.integers(0, len(won), size=(4000, len(won)))].mean(axis=1)
    ref_lo, ref_hi = np.percentile(means, [2.5, 97.5])
    assert lo == pytest.approx(ref_lo, abs=0.015) and hi == pytest.approx(ref_hi, abs=0.015)
    half = 1.96 * math.sqrt(0.65 * 0.35 / 200)  # the normal approximation agrees too
    assert lo == pytest.approx(0.65 - half, abs=0.02) and hi == pytest.approx(0.65 + half, abs=0.02)
    assert bootstrap([1, 1, 1], seed=0) == (1.0, 1.0)
    assert all(math.isnan(x) for x in bootstrap([1], seed=0))
    assert bootstrap(won, seed=5) == bootstrap(won, seed=5)


def test_random_and_overlap_baselines(tmp_path):
    profile = [{"id": "u-p1", "category": CATS[0], "text": "I love glazing ceramics in my kiln"}]
    rows = [
        row(
            i,
            CATS[0],
            "Glazing ceramics in a kiln works well.",
            "Paint on canvas instead.",
            profile=profile,
        )
        for i in range(6)
    ]
    release = write_release(tmp_path / "release", rows)
    specs = ["overlap", "overlap:context=none", "random:seed=4", "random:seed=4"]
    rms = [parse_spec(s, llm=None, judge_model="", context="profile") for s in specs]
    _, res = run(evaluate(release, rms, n_resamples=200))
    assert res[0]["metrics"]["accuracy"] == 1.0 and res[0]["context"] == "profile"
    assert res[1]["metrics"]["accuracy"] == 0.0 and res[1]["metrics"]["ties"] == 6  # no context
    assert res[2]["pairs"] == res[3]["pairs"]  # seeded


def test_release_and_spec_errors_name_the_culprit(tmp_path):
    bad = tmp_path / "bad"
    path = bad / CATS[0] / "test-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    datasets.Dataset.from_list([{"id": "x", "question": "q"}]).to_parquet(str(path))
    with pytest.raises(ReleaseError, match=r"bad: row 'x' lacks the public column\(s\)"):
        load_release(bad)
    with pytest.raises(ReleaseError, match="no such file or folder"):
        load_release(tmp_path / "nowhere")
    with pytest.raises(SpecError, match="unknown kind 'bert'"):
        parse_spec("bert", llm=None, judge_model="", context="none")
    with pytest.raises(SpecError, match="context must be"):
        parse_spec("length:context=everything", llm=None, judge_model="", context="none")
    cands = tmp_path / "c.jsonl"
    cands.write_text('{"id": "a", "candidates": ["x", "y"]}\n{"id": "b", "candidates": "xy"}\n')
    with pytest.raises(CandidatesError, match=r"c\.jsonl:2"):
        load_candidates(cands, 4)


# --- LLM judges against the simulator -----------------------------------------------------------

BEGINNER = "Explain in plain language for a beginner and define any term"
BRIEF = "Keep it short and limited to the essentials"


def persona_rows(n: int = 12) -> list[dict]:
    """Users who are beginners and want it short; chosen carries those styles' markers,
    rejected is the same points in a generic register and slightly longer."""
    rows = []
    for i in range(n):
        profile = [
            {
                "id": f"u{i}-p1",
                "category": CATS[i % 2],
                "text": f"Complete beginner here, day {i}.",
            },
            {"id": f"u{i}-p2", "category": CATS[i % 2], "text": "Keep it brief, I skim."},
        ]
        aspects = [
            {"aspect": a, "evidence": f"[u{i}-p1]", "reason": "r"} for a in (BEGINNER, BRIEF)
        ]
        rows.append(
            row(
                i,
                CATS[i % 2],
                f"In plain terms, no experience needed. Short version: {POINTS}",
                f"Here is a general overview that applies to most people asking. {POINTS}",
                profile=profile,
                aspects=aspects,
                narrative=f"The user wants an answer that {BEGINNER.lower()}; {BRIEF.lower()}.",
                question=f"How should I start with pottery number {i}?",
            )
        )
    return rows


def test_judges_use_the_profile_and_ask_both_orders(tmp_path, sim_url):
    release = write_release(tmp_path / "release", persona_rows())

    async def go():
        llm = LLM(ModelConfig(base_url=sim_url), ResponseCache(tmp_path / "cache.sqlite"))
        specs = [
            "judge",
            "judge:context=none",
            "judge:context=aspects",
            "judge-pair",
            "judge-pair:context=none",
        ]
        rms = [parse_spec(s, llm=llm, judge_model="prb-sim-1", context="profile") for s in specs]
        try:
            _, res = await evaluate(release, rms, n_resamples=200)
        finally:
            await llm.aclose()
        return res, llm.usage_dict()

    res, usage = run(go())
    acc = {r["model"]: r["metrics"]["accuracy"] for r in res}
    assert acc["judge(model=prb-sim-1)/profile"] >= 0.75
    assert acc["judge(model=prb-sim-1)/aspects"] >= 0.75
    assert acc["judge-pair(model=prb-sim-1)/profile"] >= 0.75
    assert acc["judge(model=prb-sim-1)/profile"] - acc["judge(model=prb-sim-1)/none"] >= 0.3
    assert acc["judge-pair(model=prb-sim-1)/none"] <= 0.5  # no context: length/position only
    # two answers, or both A/B orders, per pair; each judge's calls counted under its name
    assert {k: u["calls"] for k, u in usage.items()} == {f"eval {r['model']}": 24 for r in res}
    pairwise = next(r for r in res if r["model"] == "judge-pair(model=prb-sim-1)/profile")
    assert {p["score_chosen"] + p["score_rejected"] for p in pairwise["pairs"]} == {2.0}


def test_cli_writes_leaderboard_plot_and_per_pair_json(tmp_path, sim_url):
    release = write_release(tmp_path / "run" / "release", length_rows() + persona_rows(4))
    config = write_config(tmp_path, sim_url)
    result = CliRunner().invoke(
        app,
        [
            "eval",
            release,
            "--config",
            str(config),
            "--rm",
            "length",
            "--rm",
            "random",
            "--rm",
            "judge:context=none",
            "--bootstrap",
            "200",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "reward-model leaderboard" in result.output
    out = tmp_path / "run" / "eval"
    board = pd.read_csv(out / "leaderboard.csv")
    length = board.set_index("model").loc["length/profile"]
    assert length["accuracy"] == pytest.approx(round(19 / 34, 4))  # persona rows: rejected longer
    assert {"ci_low", "ci_high", "longer_preferred", "acc_Art_and_Entertainment"} <= set(board)
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    assert "| length/profile | profile |" in (out / "leaderboard.md").read_text()
    detail = json.loads((out / "models" / "judge-model-prb-sim-1-none.json").read_text())
    assert detail["context"] == "none" and len(detail["pairs"]) == 34
    assert all(p["score_chosen"] is not None for p in detail["pairs"])
    bad = CliRunner().invoke(app, ["eval", str(tmp_path / "none"), "--config", str(config)])
    assert bad.exit_code == 2 and "no such file or folder" in bad.output


# --- Best-of-N ----------------------------------------------------------------------------------


def test_correlation_matches_hand_computed_values():
    acc, bon = [0.9, 0.7, 0.5, 0.6], [0.8, 0.6, 0.3, 0.65]
    c = correlation(acc, bon)
    # ranks (4,3,1,2) vs (4,2,1,3): sum d^2 = 2, rho = 1 - 6*2/(4*15)
    assert c["spearman"] == pytest.approx(0.8)
    # pairs: 5 concordant, 1 discordant (models 2 and 4) -> (5 - 1) / 6
    assert c["kendall"] == pytest.approx(4 / 6)
    dcg = 0.8 + 0.6 / math.log2(3) + 0.65 / 2 + 0.3 / math.log2(5)  # order by accuracy
    ideal = 0.8 + 0.65 / math.log2(3) + 0.6 / 2 + 0.3 / math.log2(5)
    assert c["ndcg"] == pytest.approx(dcg / ideal)
    assert math.isnan(correlation([0.5], [0.5])["spearman"])
    assert math.isnan(correlation([0.4, 0.6], [0.0, 0.0])["ndcg"])  # nothing to rank by


def test_bon_from_file_and_from_the_generator(tmp_path, sim_url):
    rows = persona_rows(6)
    release = write_release(tmp_path / "run" / "release", rows)
    fitted = f"In plain terms, no experience needed. Essentials only: {POINTS}"
    generic = f"Here is a general overview. {POINTS}"
    longest = f"Here is a long and general overview that applies to most people. {POINTS} " * 2
    cands = tmp_path / "cands.jsonl"
    cands.write_text(
        "".join(
            json.dumps({"id": r["id"], "candidates": [generic, fitted, longest]}) + "\n"
            for r in rows
        )
    )
    config = write_config(tmp_path, sim_url)
    args = [
        "eval",
        "bon",
        release,
        "--config",
        str(config),
        "--bootstrap",
        "100",
        "--rm",
        "length",
        "--rm",
        "judge",
        "--rm",
        "judge:context=none",
    ]
    result = CliRunner().invoke(app, [*args, "--candidates", str(cands)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "run" / "eval" / "bon"
    board = pd.read_csv(out / "bon_leaderboard.csv").set_index("model")
    length = json.loads((out / "models" / "length-profile.json").read_text())
    assert {p["pick"] for p in length["picks"]} == {2}  # the longest candidate
    judge = json.loads((out / "models" / "judge-model-prb-sim-1-profile.json").read_text())
    # the oracle gives the fitted answer 2 on both aspects; generic ones get less
    assert all(p["oracle"][1] == 1.0 and p["oracle"][0] < 1.0 for p in judge["picks"])
    assert board.loc["judge(model=prb-sim-1)/profile", "bon_quality"] >= 0.8
    assert (
        board.loc["judge(model=prb-sim-1)/profile", "bon_win_rate"]
        > board.loc["length/profile", "bon_win_rate"]
    )
    summary = json.loads((out / "bon_summary.json").read_text())
    assert summary["correlation"]["win_rate"]["models"] == 3 and summary["skipped"] == {}
    assert (out / "bon_vs_accuracy.png").exists()
    # a file whose ids are no row of the release: one line, not a summary of NaN (issue 48)
    strangers = tmp_path / "strangers.jsonl"
    strangers.write_text(json.dumps({"id": "nobody", "candidates": [generic, fitted]}) + "\n")
    result = CliRunner().invoke(app, [*args, "--candidates", str(strangers)])
    assert result.exit_code == 2, result.output
    assert "none of its 1 ids is a row of" in " ".join(result.output.split())

    result = CliRunner().invoke(app, [*args, "--n", "3", "--out", str(tmp_path / "gen")])
    assert result.exit_code == 0, result.output
    generated = [json.loads(x) for x in (tmp_path / "gen/bon/candidates.jsonl").open()]
    assert len(generated) == 6 and all(len(g["candidates"]) == 3 for g in generated)
    assert any(len(set(g["candidates"])) > 1 for g in generated)  # N seeds, N samples


def test_a_judge_prompt_fits_the_endpoints_window_cutting_only_the_user_context(
    tmp_path, sim_factory
):
    """~3,000-word profiles against an endpoint with a 600-token window (the simulator says so
    in its model list, as vLLM does): the context is cut by whole posts from its end, the
    question and the answers always go in, nothing is refused, and the cut is counted."""
    url = sim_factory(context_limit=600)
    filler = "I write long posts about my week, my garden and the weather here. " * 4
    rows = [
        dict(
            r,
            profile=r["profile"]
            + [
                {"id": f"{r['id']}-f{k}", "category": r["category"], "text": filler}
                for k in range(60)
            ],
        )
        for r in persona_rows()
    ]
    assert len(user_context(rows[0], "profile").split()) > 2500
    release = write_release(tmp_path / "release", rows)

    async def go(specs):
        llm = LLM(ModelConfig(base_url=url), ResponseCache(tmp_path / "cache.sqlite"))
        rms = [parse_spec(s, llm=llm, judge_model="prb-sim-1", context="profile") for s in specs]
        try:
            return (await evaluate(release, rms, n_resamples=50))[1], rms
        finally:
            await llm.aclose()

    res, rms = run(go(["judge", "judge-pair"]))
    for r, rm in zip(res, rms, strict=True):
        assert rm.window is None and not r["metrics"]["errors"]  # the endpoint's, asked
        assert r["metrics"]["accuracy"] >= 0.75  # the first posts, the telling ones, stay
        t = r["truncation"]
        assert t["cut"] == t["contexts"] == 2 * len(rows) and t["too_long"] == 0
        assert t["tokens_cut"] > 2 * len(rows) * 2000
    stats = httpx.get(url.removesuffix("/v1") + "/stats").json()
    assert not stats.get("fault_400")
    # an answer that cannot fit with its question alone is an error row, not a call
    huge = [dict(rows[0], id="huge", chosen="word " * 800)]
    release = write_release(tmp_path / "huge", huge)
    res, _ = run(go(["judge:context_window=600"]))
    assert res[0]["pairs"][0]["error"].startswith("too_long") and res[0]["metrics"]["errors"] == 1
    with pytest.raises(SpecError, match="context_window=big: give a number of tokens"):
        parse_spec("judge:context_window=big", llm=object(), judge_model="m", context="none")


# --- the published protocol ----------------------------------------------------------------------


def public_prompts_folder(root):
    """A stand-in for the user's clone of the public repository: prompts/pairwise_*.txt with the
    public placeholders (the wording is this test's own)."""
    folder = root / "public-repo" / "prompts"
    folder.mkdir(parents=True)
    (folder / "pairwise_system.txt").write_text(
        "Compare two responses to a question. Explain briefly, then end with 'Result: A' or "
        "'Result: B'.\n",
        encoding="utf-8",
    )
    (folder / "pairwise_user.txt").write_text(
        "Question:\n```\n{question}\n```\n\nFirst:\n```\n{Response_A}\n```\n\nSecond:\n```\n"
        "{Response_B}\n```\n",
        encoding="utf-8",
    )
    return folder.parent


def public_pairwise(url, folder, rows) -> dict[str, dict]:
    """The public pairwise scorer, re-implemented from its description: per category a
    generator seeded 42 draws once per pair whether chosen is A; the user template filled by
    plain replacement; temperature 0, 512 tokens; the verdict is what follows "result:" after
    the last </think>, quotes and asterisks removed; none found counts as A."""
    import random

    import openai

    system = (folder / "prompts" / "pairwise_system.txt").read_text().strip()
    template = (folder / "prompts" / "pairwise_user.txt").read_text().strip()
    client = openai.OpenAI(base_url=url, api_key="sk-test")
    out, rngs = {}, {}
    for r in rows:
        first = rngs.setdefault(r["category"], random.Random(42)).random() < 0.5
        a, b = (r["chosen"], r["rejected"]) if first else (r["rejected"], r["chosen"])
        user = template.replace("{question}", r["question"]).replace("{Response_A}", a)
        user = user.replace("{Response_B}", b)
        reply = client.chat.completions.create(
            model="prb-sim-1",
            temperature=0.0,
            max_tokens=512,
            seed=0,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            extra_headers={"X-PRB-Task": "published_pairwise"},  # how the simulator is told
        )
        text = reply.choices[0].message.content.strip().split("</think>")[-1].strip()
        text = text.replace('"', "").replace("*", "").strip()
        pred = None
        if "result:" in text.lower():
            rest = text.lower().split("result:")[1].strip()
            pred = "A" if rest.startswith("a") else "B" if rest.startswith("b") else None
        out[r["id"]] = {
            "first": first,
            "pred": pred or "A",
            "failed": pred is None,
            "correct": (pred or "A") == ("A" if first else "B"),
        }
    return out


def test_the_published_pairwise_judge_equals_the_public_scorer(tmp_path, sim_url):
    rows = [dict(r, id=f"{r['category'][:3]}-{r['id']}") for r in length_rows() + persona_rows()]
    release = write_release(tmp_path / "release", rows)
    repo = public_prompts_folder(tmp_path)

    async def go():
        llm = LLM(ModelConfig(base_url=sim_url), ResponseCache(tmp_path / "cache.sqlite"))
        rm = parse_spec(
            "judge-pair",
            llm=llm,
            judge_model="prb-sim-1",
            context="none",
            protocol="published",
            public_prompts=str(repo),
        )
        try:
            loaded, [res] = await evaluate(release, [rm], n_resamples=100)
        finally:
            await llm.aclose()
        return loaded, res, llm.usage_dict()

    loaded, res, usage = run(go())
    ref = public_pairwise(sim_url, repo, loaded)
    assert {k: u["calls"] for k, u in usage.items()} == {f"eval {res['model']}": len(rows)}
    for p in res["pairs"]:  # one order per pair, the scorer's; its verdict, read its way
        want = ref[p["id"]]
        assert (p["ab"] is not None) == want["first"] and (p["ba"] is None) == want["first"]
        assert (p["ab"] or p["ba"]) == want["pred"] and p["won"] == want["correct"]
    assert res["metrics"]["accuracy"] == pytest.approx(
        np.mean([w["correct"] for w in ref.values()])
    )
    assert res["unparsed"] == sum(w["failed"] for w in ref.values()) > 0
    firsts = [w["first"] for w in ref.values()]
    assert 0 < sum(firsts) < len(firsts) and res["metrics"]["ties"] == 0


def test_cli_names_the_protocol_and_refuses_what_it_cannot_do(tmp_path, sim_url):
    rows = [dict(r, id=f"{r['category'][:3]}-{r['id']}") for r in length_rows() + persona_rows()]
    release = write_release(tmp_path / "run" / "release", rows)
    config = write_config(tmp_path, sim_url)
    repo = public_prompts_folder(tmp_path)
    base = ["eval", release, "--config", str(config), "--bootstrap", "50"]
    ok = CliRunner().invoke(
        app,
        [
            *base,
            "--protocol",
            "published",
            "--public-prompts",
            str(repo),
            "--rm",
            "length",
            "--rm",
            "judge-pair",
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert "protocol published, ties lose" in " ".join(ok.output.split())
    out = tmp_path / "run" / "eval"
    board = pd.read_csv(out / "leaderboard.csv")
    assert set(board["protocol"]) == {"published"} and set(board["tie_rule"]) == {"lose"}
    assert set(board["context"]) == {"none"}  # the question only
    notes = (out / "leaderboard.md").read_text()
    assert "Protocol `published`: the public scorer's rules" in notes and "Ties: ties lose" in notes
    detail = json.loads((out / "models" / "judge-pair-model-prb-sim-1-none.json").read_text())
    assert detail["protocol"] == "published" and "counts as A" in detail["scoring"]
    prb = CliRunner().invoke(app, [*base, "--rm", "length"])
    assert prb.exit_code == 0 and "protocol prb, ties lose" in " ".join(prb.output.split())
    assert "Protocol `prb`" in (out / "leaderboard.md").read_text()
    for extra, said in (
        (
            ["--context", "profile"],
            "--context profile: the published protocol gives the model the question only",
        ),
        (["--rm", "judge"], "the published protocol has no pointwise LLM judge"),
        (["--rm", "judge-pair"], "needs --public-prompts DIR"),
        (
            ["--rm", "judge-pair", "--public-prompts", str(tmp_path)],
            "pairwise_system.txt: cannot read the public judge prompt (no such file)",
        ),
    ):
        bad = CliRunner().invoke(app, [*base, "--protocol", "published", *extra])
        assert bad.exit_code == 2 and said in " ".join(bad.output.split()), bad.output
        assert "Traceback" not in bad.output
    (repo / "prompts" / "pairwise_user.txt").write_text("Compare {question} and {Response_A}.")
    bad = CliRunner().invoke(
        app, [*base, "--protocol", "published", "--public-prompts", str(repo), "--rm", "judge-pair"]
    )
    assert bad.exit_code == 2 and "pairwise_user.txt: no {Response_B} in the template" in " ".join(
        bad.output.split()
    )
    bad = CliRunner().invoke(app, [*base, "--protocol", "public"])
    assert bad.exit_code == 2 and "--protocol public: use one of prb, published" in bad.output


def test_the_audit_and_eval_judges_follow_one_window_rule(tmp_path, sim_factory):
    """One rule in the call path: the audit's persona-aware judge (fit=user_context) has its
    profile cut to the endpoint's window, or to the config's window where the endpoint gives
    none; a judge prompt whose question and answer alone are over it is refused and counted
    without a request; a resumed call the cache answers needs no endpoint."""
    from pipeline.calls import LLMError
    from pipeline.llm.prompts import load_prompt
    from pipeline.probes import run_judges

    url = sim_factory(context_limit=600)
    filler = "I write long posts about my week, my garden and the weather here. " * 4
    rows = [
        dict(
            r,
            profile=r["profile"]
            + [
                {"id": f"{r['id']}-f{k}", "category": r["category"], "text": filler}
                for k in range(60)
            ],
        )
        for r in persona_rows(6)
    ]

    async def audit():
        llm = LLM(ModelConfig(base_url=url), ResponseCache(tmp_path / "audit.sqlite"))
        try:
            probes = await run_judges(rows, llm, "prb-sim-1")
        finally:
            await llm.aclose()
        return probes, llm

    probes, llm = run(audit())
    cut = llm.truncation["audit"]
    # every call with a profile (the user's, both orders; a contrast user's) was cut, the
    # blind ones (no profile) were not
    assert cut["contexts"] > cut["cut"] >= 2 * len(rows) and cut["too_long"] == 0
    assert not llm.usage["audit"].failures  # every call fitted, none refused by the server
    aware = next(p for p in probes if p.name == "judge, persona-aware")
    assert aware.n and aware.value >= 0.75  # the first posts, the telling ones, stay

    stats = sim_factory()  # no window of its own: the config's applies
    pointwise = load_prompt("rm_pointwise")
    cache = tmp_path / "judge.sqlite"
    posts = "\n".join(f"[p{k}] {filler}" for k in range(40))

    async def judge(answer, base_url=stats, window=800):
        llm = LLM(ModelConfig(base_url=base_url, context_window=window), ResponseCache(cache))
        said = {"user_context": posts, "question": "How?", "answer": answer}
        try:
            return await llm.call(
                pointwise, stage="eval", model="prb-sim-1", variables=said, fit="user_context"
            ), llm
        finally:
            await llm.aclose()

    short, llm = run(judge("Start small and practise every week."))
    assert llm.truncation["eval"]["cut"] == 1 and llm.truncation["eval"]["tokens_cut"] > 1000
    before = httpx.get(stats.removesuffix("/v1") + "/stats").json()["requests"]
    with pytest.raises(LLMError, match="too_long.*with no user_context") as e:
        run(judge("Start small and practise every week. " * 200))
    assert e.value.kind == "too_long"
    assert httpx.get(stats.removesuffix("/v1") + "/stats").json()["requests"] == before
    # resumed with the endpoint gone: the config's window cuts the same way, the cache answers
    again, llm = run(judge("Start small and practise every week.", "http://127.0.0.1:9/v1"))
    assert again.cached and again.content == short.content and llm._windows == {}


def test_the_position_free_judge_probes_read_each_answer_alone(tmp_path, sim_url):
    """`prb audit --position-free`: each answer's P(yes) asked alone (logprobs), through the
    call path. With the user's profile the simulator's judge prefers the answer in the user's
    styles; without it, both answers read alike; and the advantage does not survive a
    contrasting user's profile. Asked again, the cache answers every call."""
    from pipeline.probes import run_judges

    rows = persona_rows(12)
    for k, r in enumerate(rows):  # two kinds of user, so a contrast exists for each
        if k % 2:  # a blunt professional, and an answer in that style for them
            r["profile"] = [
                {
                    "id": f"u{k}-p1",
                    "category": r["category"],
                    "text": "I'm a professional, no fluff, get to the point.",
                }
            ]
            r["chosen"] = f"Bottom line: do these things, and you can skip the rest. {POINTS}"

    async def audit():
        llm = LLM(ModelConfig(base_url=sim_url), ResponseCache(tmp_path / "audit.sqlite"))
        try:
            return await run_judges(rows, llm, "prb-sim-1", position_free=True), llm
        finally:
            await llm.aclose()

    probes, llm = run(audit())
    by = {p.name: p for p in probes}
    aware = by["judge, persona-aware, position-free"]
    assert aware.n == len(rows) and aware.value >= 0.75 and all(p.family == "judge" for p in probes)
    # two answers under no profile, the user's and (where one exists) a contrasting user's
    assert 4 * len(rows) <= llm.usage["audit"].calls <= 6 * len(rows)
    assert not llm.usage["audit"].failures
    swap = by["judge, counterfactual, position-free: survives the swap"]
    assert swap.n > 0 and swap.value <= 0.5  # the advantage was personal
    again, llm = run(audit())
    assert llm.usage["audit"].calls == 0 and [p.value for p in again] == [p.value for p in probes]


def test_the_aware_judge_is_split_by_what_each_rewrite_pair_shows(tmp_path, sim_url):
    """A release that carries `differences` (the rewrite design) gets the persona-aware figure
    per kind of pair (what the text shows it differs on), each with its n and interval, and
    the parts add up to the whole; a release without them gets the whole alone."""
    from pipeline.probes import run_judges

    rows = persona_rows(12)
    kinds = ["format", "cultural_context", "cultural_context+format"]
    for k, r in enumerate(rows):
        shown = kinds[k % 3].split("+")
        r["differences"] = [
            {"dimension": d, "chosen": "a", "rejected": "b", "realised": True} for d in shown
        ] + [{"dimension": "constraints", "chosen": "a", "rejected": "b", "realised": False}]

    async def audit(rows):
        llm = LLM(ModelConfig(base_url=sim_url), ResponseCache(tmp_path / "audit.sqlite"))
        try:
            return await run_judges(rows, llm, "prb-sim-1", position_free=True)
        finally:
            await llm.aclose()

    by = {p.name: p for p in run(audit(rows))}
    whole = by["judge, persona-aware, position-free"]
    parts = {k: by[f"judge, persona-aware, position-free: {k} pairs"] for k in kinds}
    assert all(p.n == 4 and p.low <= p.value <= p.high for p in parts.values())
    assert sum(p.n for p in parts.values()) == whole.n == 12
    assert sum(p.value * p.n for p in parts.values()) == pytest.approx(whole.value * whole.n)
    assert not [n for n in by if "constraints" in n]  # not realised: no kind of its own
    plain = [{k: v for k, v in r.items() if k != "differences"} for r in rows]
    assert not [p for p in run(audit(plain)) if p.name.endswith(" pairs")]


def test_the_swap_probe_asks_each_answer_under_the_user_it_was_written_for(tmp_path, sim_url):
    """Issue 46's 2x2 swap probe: chosen preferred with its user's profile, rejected with the
    profile of the user it was written for (`rejected_for`). Answers written for their users
    read high; the same answers with chosen and rejected exchanged by a fair coin read near
    0.5; pairs written for no one are not asked."""
    import random

    from pipeline.probes import run_judges

    blunt = "Bottom line: do these things, and you can skip the rest."
    gentle = "In plain terms, no experience needed. Short version:"
    rows = persona_rows(24)
    for k, r in enumerate(rows):
        r["persona_id"], r["rejected_for"] = f"u{k}", f"u{k + 1 if k % 2 == 0 else k - 1}"
        if k % 2:  # a blunt professional
            r["profile"] = [
                {
                    "id": f"u{k}-p1",
                    "category": r["category"],
                    "text": "I'm a professional, no fluff, get to the point.",
                }
            ]
        mine, theirs = (blunt, gentle) if k % 2 else (gentle, blunt)
        r["chosen"], r["rejected"] = f"{mine} {POINTS}", f"{theirs} {POINTS}"
    coin = random.Random(7)
    shuffled = [
        dict(r, chosen=r["rejected"], rejected=r["chosen"]) if coin.random() < 0.5 else r
        for r in rows
    ]
    unwritten = [{k: v for k, v in r.items() if k != "rejected_for"} for r in rows]
    # a partner with no pair of its own in the release: its profile travels with the pair
    alone = [
        dict(r, rejected_for_profile=rows[k + 1]["profile"])
        for k, r in enumerate(rows)
        if k % 2 == 0
    ]
    bare = [{k: v for k, v in r.items() if k != "rejected_for_profile"} for r in alone]

    async def swap(rs, position_free):
        llm = LLM(ModelConfig(base_url=sim_url), ResponseCache(tmp_path / "audit.sqlite"))
        try:
            found = await run_judges(rs, llm, "prb-sim-1", position_free=position_free)
        finally:
            await llm.aclose()
        return next(p for p in found if p.name.startswith("judge, swap 2x2"))

    for free in (True, False):
        written, coined, none = (run(swap(rs, free)) for rs in (rows, shuffled, unwritten))
        assert written.n == len(rows) and written.value >= 0.75 and not written.leak, written
        assert coined.low < 0.5 < coined.high, coined  # no signal: no reading
        assert none.n == 0 and none.value is None
        carried, missing = run(swap(alone, free)), run(swap(bare, free))
        assert carried.n == len(alone) and carried.value >= 0.75, carried
        assert missing.n == 0


def test_eval_bon_and_rl_are_subcommands_with_their_own_options(tmp_path):
    """Issue 40: `prb eval [bon|rl]` was one command that took every option of all three and
    ignored the ones not meant for it (`prb eval R --n 8` scored without a word); each is its
    own subcommand now, and `prb eval RELEASE` still scores."""
    from public_releases import controlled
    from typer.testing import CliRunner

    from pipeline.cli import app

    release = tmp_path / "r.jsonl"
    release.write_text("\n".join(json.dumps(r) for r in controlled()))
    runner = CliRunner()
    scored = runner.invoke(app, ["eval", str(release), "--rm", "length", "--bootstrap", "10"])
    assert scored.exit_code == 0, scored.output
    assert (tmp_path / "eval-r" / "leaderboard.csv").exists()
    for args, option in (
        (["eval", str(release), "--rm", "length", "--n", "8"], "--n"),
        (["eval", "bon", str(release), "--policy", "p"], "--policy"),
        (["eval", "rl", str(release), "--policy", "p", "--bootstrap", "10"], "--bootstrap"),
    ):
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and f"No such option: {option}" in refused.output, args
    assert "--n" in runner.invoke(app, ["eval", "bon", "--help"]).output
