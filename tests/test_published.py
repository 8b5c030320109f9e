"""Rebuilding the published benchmark: LaMP-QA imported as published (its files' and its hub
configs' layouts, written here by the tests), rubric sources, profile selection, the two
recipes built on the bundled fixture through the simulator, and `prb compare` between them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import yaml
from conftest import build, checkout_copy

from pipeline.config import ConfigError, ProfileConfig, load_config
from pipeline.personas.files import PersonaFileError
from pipeline.personas.importer import load_external
from pipeline.records import FilterRecord, Pair, ProfileItem, RubricRecord, Task
from pipeline.release.load import load_rows
from pipeline.retrieval import RetrieverError, rank

REPO = Path(__file__).resolve().parent.parent
CATEGORIES = ["Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"]


def lamp_rows(category: str, split: str, n: int = 2) -> list[dict]:
    """Rows exactly as LaMP-QA has them: no category, posts with only `id` and `text`."""
    out = []
    for u in range(n):
        qid = f"{CATEGORIES.index(category)}{split[:2]}{u}"
        out.append(
            {
                "id": qid,
                "question": f"How do I get started with hobby {qid}?",
                "narrative": f"User {qid} is on a tight budget and wants numbered steps.",
                "profile": [
                    {"id": f"{qid}0{k}", "text": f"Post {k} of {qid}: budget hobby."}
                    for k in range(4)
                ],
                "rubric_aspects": [
                    {
                        "aspect": "Keep it cheap",
                        "reason": "Money is tight.",
                        "evidence": "is on a tight budget",
                    },
                    {
                        "aspect": "Give numbered steps",
                        "reason": "Asked for steps.",
                        "evidence": "wants numbered steps",
                    },
                ],
            }
        )
    return out


def write_lamp_files(folder: Path, fmt: str = "json") -> dict[str, list[dict]]:
    """LaMP-QA's download script's layout: `{category}_{split}.json`, a JSON list of rows."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for category in CATEGORIES:
        for split in ("train", "test"):
            rows = lamp_rows(category, split)
            if category == CATEGORIES[0] and split == "test":  # same posts, two questions
                rows[1]["profile"] = rows[0]["profile"]
            path = folder / f"{category}_{split}.{fmt}"
            if fmt == "json":
                path.write_text(json.dumps(rows))
            elif fmt == "jsonl":
                path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            else:
                datasets.Dataset.from_list(rows).to_parquet(str(path))
            written[f"{category}_{split}"] = rows
    return written


def write_lamp_hub(folder: Path) -> dict[str, list[dict]]:
    """The hub's layout: one config per category, splits train and test, no category column."""
    folder.mkdir(parents=True, exist_ok=True)
    card, written = ["---", "configs:"], {}
    for category in CATEGORIES:
        card += [f"- config_name: {category}", "  data_files:"]
        for split in ("train", "test"):
            rows = lamp_rows(category, split)
            (folder / category).mkdir(exist_ok=True)
            datasets.Dataset.from_list(rows).to_parquet(str(folder / category / f"{split}.parquet"))
            card += [f"  - split: {split}", f"    path: {category}/{split}.parquet"]
            written[f"{category}_{split}"] = rows
    (folder / "README.md").write_text("\n".join([*card, "---", "", "# LaMP-QA-shaped", ""]))
    return written


def check_lossless(personas, questions, written: dict, split: str) -> None:
    expected = [
        (c, r)
        for key, rows in written.items()
        for r in rows
        for c in [key.rsplit("_", 1)[0]]
        if key.endswith(f"_{split}")
    ]
    # every question is its own user, even the two that share their posts
    assert len(personas) == len(questions) == len(expected)
    by_q = {q.question_id: q for q in questions}
    by_p = {p.persona_id: p for p in personas}
    for category, row in expected:
        q = by_q[row["id"]]
        p = by_p[q.asked_by[0]]
        assert q.category == p.category == category
        assert q.question == row["question"] and q.narrative == p.narrative == row["narrative"]
        assert [a.model_dump() for a in q.rubric_aspects] == row["rubric_aspects"]
        assert [{"id": i.id, "text": i.text} for i in p.profile] == row["profile"]
        assert {i.category for i in p.profile} == {category}


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
def test_lamp_qa_files_import_as_published_one_user_per_question(tmp_path, fmt):
    written = write_lamp_files(tmp_path / "lamp", fmt)
    personas, questions = load_external(str(tmp_path / "lamp"), "test")
    check_lossless(personas, questions, written, "test")
    assert not any("tr" in q.question_id for q in questions)  # the train split left out
    every = load_external(str(tmp_path / "lamp"))[1]  # no split: all of them
    assert len(every) == 12
    # one file of the layout alone: its category from its name
    one = load_external(str(tmp_path / "lamp" / f"Society_and_Culture_test.{fmt}"))[0]
    assert {p.category for p in one} == {"Society_and_Culture"} and len(one) == 2


def test_lamp_qa_hub_layout_imports_by_config_and_split(tmp_path):
    written = write_lamp_hub(tmp_path / "hub")
    # hf:NAME goes through datasets' hub loader; offline, a local folder in the hub layout
    personas, questions = load_external(f"hf:{tmp_path / 'hub'}", "test")
    check_lossless(personas, questions, written, "test")
    one = load_external(f"hf:{tmp_path / 'hub'}:Lifestyle_and_Personal_Development", "train")[1]
    assert [q.question_id for q in one] == ["1tr0", "1tr1"]
    with pytest.raises(PersonaFileError, match="has no split 'validation'"):
        load_external(f"hf:{tmp_path / 'hub'}", "validation")


def test_lamp_qa_layout_errors_name_the_folder_and_record(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PersonaFileError, match=r"empty: no LaMP-QA files .* of split 'test'"):
        load_external(str(tmp_path / "empty"), "test")
    written = write_lamp_files(tmp_path / "lamp")
    rows = written["Art_and_Entertainment_test"]
    del rows[1]["question"]
    (tmp_path / "lamp" / "Art_and_Entertainment_test.json").write_text(json.dumps(rows))
    with pytest.raises(PersonaFileError) as err:
        load_external(str(tmp_path / "lamp"), "test")
    assert "Art_and_Entertainment_test.json: record 2 (id '0te1')" in str(err.value)
    assert "missing required field(s) question" in str(err.value)


def test_bm25_ranks_the_posts_about_the_question_first_and_records_the_kept_ids():
    posts = [
        ProfileItem(id=f"p{k}", category="c", text=t)
        for k, t in enumerate(
            [
                "My cat scratches the sofa every night.",
                "Which watercolour paper is cheap enough for practice?",
                "Best banana bread recipe?",
                "Mixing watercolour paints always turns muddy for me.",
            ]
        )
    ]
    ranking = rank("How do I start painting with watercolour?", posts, ProfileConfig(top_k=2))
    assert [r.id for r in ranking[:2]] == ["p1", "p3"] or [r.id for r in ranking[:2]] == [
        "p3",
        "p1",
    ]
    assert ranking[0].score >= ranking[1].score > ranking[2].score == ranking[3].score == 0
    assert [r.id for r in ranking[2:]] == ["p0", "p2"]  # ties keep the profile's order


def test_a_dense_retriever_ranks_from_a_local_model_folder_only(tmp_path):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "how",
        "do",
        "i",
        "paint",
        "watercolour",
        "cat",
        "sofa",
        "bread",
        "cheap",
    ]
    (tmp_path / "vocab.txt").write_text("\n".join(words))
    path = tmp_path / "tiny-encoder"
    BertModel(
        BertConfig(
            vocab_size=len(words),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
        )
    ).save_pretrained(path)
    BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(path)
    encoder = models.Transformer(str(path))
    SentenceTransformer(modules=[encoder, models.Pooling(16)]).save(str(tmp_path / "st"))
    texts = ["cat sofa", "cheap watercolour", "bread", "paint"]
    posts = [ProfileItem(id=f"p{k}", category="c", text=t) for k, t in enumerate(texts)]
    cfg = ProfileConfig(top_k=2, dense_model=str(tmp_path / "st"))
    ranking = rank("how do i paint watercolour", posts, cfg)
    assert sorted(r.id for r in ranking) == ["p0", "p1", "p2", "p3"]
    assert [r.score for r in ranking] == sorted((r.score for r in ranking), reverse=True)
    assert ranking == rank("how do i paint watercolour", posts, cfg)  # deterministic
    with pytest.raises(RetrieverError, match="nowhere: no such folder"):
        rank("q", posts, ProfileConfig(top_k=2, dense_model=str(tmp_path / "nowhere")))


def test_recipe_and_rubric_source_settings_are_checked(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipe: fancy\n")
    with pytest.raises(ConfigError, match="unknown recipe 'fancy'"):
        load_config(bad)
    bad.write_text("rubrics: {source: imported}\n")
    with pytest.raises(ConfigError, match="library personas have none"):
        load_config(bad)
    bad.write_text("generation: {chosen_prompt: nothing_here}\n")
    with pytest.raises(ConfigError, match="no prompt file prompts/nothing_here.yaml"):
        load_config(bad)
    cfg = load_config(REPO / "configs" / "published.yaml")
    assert (cfg.recipe, cfg.rubrics.source, cfg.profile.top_k, cfg.filters.mode) == (
        "published",
        "imported",
        10,
        "record",
    )
    assert not cfg.generation.content_plan and cfg.personas.split == "test"
    assert load_config(REPO / "configs" / "published-prb.yaml").filters.mode == "drop"


def lines(path: Path, model):
    return [model.model_validate_json(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def recipes(tmp_path_factory, sim_url) -> dict[str, Path]:
    """Both recipes on the bundled LaMP-QA-format fixture, through the simulator."""
    runs = {}
    for recipe in ("published", "prb"):
        tmp = tmp_path_factory.mktemp(recipe)
        data = yaml.safe_load((REPO / "configs" / f"demo-lamp-{recipe}.yaml").read_text())
        data |= {"outputs_dir": str(tmp / "outputs")}
        data["model"]["base_url"] = sim_url
        config = tmp / "config.yaml"
        config.write_text(yaml.safe_dump(data))
        runs[recipe] = Path(build(config)["run_dir"])
    return runs


def test_both_recipes_releases_verify(recipes):
    """Issue 48: `profile.top_k` hashed ids from the ranked posts that the release does not
    carry, so `prb release verify` (and so `push`) refused every row of a valid release."""
    from pipeline.release.publish import verify

    for recipe, run in recipes.items():
        assert verify(run / "release") == [], recipe


def test_the_published_recipe_uses_imported_aspects_ranked_posts_and_no_plan(recipes):
    run = recipes["published"]
    fixture = {
        r["id"]: r
        for f in sorted((REPO / "personas" / "lamp-qa").glob("*_test.json"))
        for r in json.loads(f.read_text())
    }
    tasks = lines(run / "questions.jsonl", Task)
    assert len(tasks) == len(fixture) == 12  # one pair per question, every user
    for t in tasks:
        assert len(t.profile_ids) == 10 and len(t.profile_ranking) == len(t.persona.profile)
        assert t.profile_ids == [r.id for r in t.profile_ranking[:10]]
    plans = lines(run / "rubrics.jsonl", RubricRecord)
    for r in plans:  # imported as published, no planner call
        assert r.calls == {} and r.source == "imported"
        row = fixture[r.task.question_id]
        assert [a.model_dump() for a in r.rubric_aspects] == row["rubric_aspects"]
        assert r.narrative == row["narrative"]
    pairs = lines(run / "pairs.jsonl", Pair)
    for p in pairs:
        assert p.key_points == [] and set(p.calls) == {"chosen", "rejected"}
        assert set(p.prompt_versions) == {"published_chosen", "published_rejected"}
        assert p.rejected_strategy == "avoid_aspects"
    filtered = lines(run / "filters.jsonl", FilterRecord)
    # record-only: every pair kept, what the checks would drop is recorded instead
    assert all(f.kept and not f.reasons for f in filtered)
    assert any(f.would_drop for f in filtered)
    adherence = [f.checks["adherence"] for f in filtered]
    assert all(a["chosen"] == 1.0 and a["rejected"] == 0.0 for a in adherence)
    manifest = json.loads((run / "release" / "manifest.json").read_text())
    assert manifest["config"]["recipe"] == "published"
    assert set(manifest["prompts"]) >= {"published_chosen", "published_rejected"}
    assert not {"planner", "content_plan", "chosen", "rejected"} & set(manifest["prompts"])
    card = (run / "release" / "README.md").read_text()
    assert "Recipe: **`published`**" in card and "Not filtered" in card
    rows, _ = load_rows(run / "release")
    would = {r["id"]: r["would_drop"] for r in rows}
    assert would == {f.pair.pair_id: f.would_drop for f in filtered}


def test_the_prb_recipe_on_the_same_users_records_the_planner_beside_imported_aspects(recipes):
    run = recipes["prb"]
    plans = lines(run / "rubrics.jsonl", RubricRecord)
    assert plans and all(r.source == "both" and r.planner_aspects for r in plans)
    for r in plans:
        assert r.agreement.of == len(r.rubric_aspects)
        assert r.agreement.found == sum(m is not None for m in r.agreement.matches)
    found = sum(r.agreement.found for r in plans)
    of = sum(r.agreement.of for r in plans)
    assert 0 < found < of  # the planner finds some of the users' own aspects, not all
    pairs = lines(run / "pairs.jsonl", Pair)
    assert all(p.key_points and "content_plan" in p.calls for p in pairs)
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "audit", str(run)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = (run / "audit" / "summary.md").read_text()
    assert f"Imported aspects the planner found too: {found} of {of}" in summary


def test_compare_reports_on_the_two_recipes(recipes, tmp_path):
    out = tmp_path / "cmp"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "compare",
            str(recipes["published"] / "release"),
            str(recipes["prb"] / "release"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "12 shared pairs" in done.stdout and "would keep" in done.stdout
    report = json.loads((out / "compare.json").read_text())
    assert report["shared"] == 12 and report["matched_on"] == "user and question"
    a, b = report["a"], report["b"]
    assert a["keep"]["recipe"] == "published" and b["keep"]["recipe"] == "prb"
    # no shared plan: the published answers differ in length; prb's share the plan (a
    # persona_swap answer opens with another user's sentences: longer or shorter alike)
    assert b["shared"]["median_length_ratio"] == 1.0 and b["shared"]["chosen_longer"] <= 0.5
    assert a["shared"]["chosen_longer"] > 0
    assert a["shared"]["would_keep"] < 1.0 and b["shared"]["would_keep"] is None
    assert a["shared"]["probes"]["verdict"] == "too few pairs"  # 12 pairs: no verdict
    md = (out / "compare.md").read_text()
    assert "| metric | A, shared | B, shared | A, all | B, all |" in md
    assert "probe: answer-only classifier" in md
    # the checks' declared figures, read from each release's own columns
    blind = b["shared"]["checks"]["blind"]
    assert blind["n"] > 0 and blind["pairs"] == 12 and "persona-blind judge picks chosen" in md
    assert "quality" in a["shared"]["checks"] and "quality" in b["shared"]["checks"]
    for png in ("probes.png", "lengths.png"):
        assert (out / "plots" / png).read_bytes()[:4] == b"\x89PNG"
    assert "plots/probes.png" in (out / "report.html").read_text()


def test_compare_of_releases_without_shared_pairs_says_so(tmp_path):
    from public_releases import controlled, leaky

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(json.dumps(r) for r in controlled()[:10]))
    others = [
        {**r, "question": f"Another question, number {k}?"} for k, r in enumerate(leaky()[:10])
    ]
    b.write_text("\n".join(json.dumps(r) for r in others))
    from pipeline.audit.compare import compare

    report = compare(str(a), str(b), tmp_path / "out")
    assert report["shared"] == 0 and report["a"]["shared"]["pairs"] == 0
    assert report["a"]["all"]["pairs"] == 10 and report["plots"] == {}
    assert (
        "Shared pairs (same user and question): **0**"
        in (tmp_path / "out" / "compare.md").read_text()
    )


def test_prb_demo_recipe_published_builds_offline(tmp_path):
    from conftest import prefect_env

    tree = checkout_copy(tmp_path / "prb")  # the demo writes under its own outputs/

    def prb(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", *args],
            cwd=tree,
            env=prefect_env(PYTHONPATH=str(tree)),
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = prb("demo", "--recipe", "published")
    assert done.returncode == 0, done.stderr[-2000:]
    release = tree / "outputs" / "demo-lamp-published" / "release"
    rows, _ = load_rows(release)
    assert len(rows) == 12 and {r["rejected_strategy"] for r in rows} == {"avoid_aspects"}
    assert json.loads((release / "manifest.json").read_text())["simulated"] is True
    bad = prb("demo", "--recipe", "nope")
    assert bad.returncode == 2 and "unknown --recipe 'nope'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_imported_aspects_and_the_agreement_figure():
    from pipeline.records import Persona, RubricAspect
    from pipeline.stages.rubrics import agreement, imported

    def aspect(text: str) -> RubricAspect:
        return RubricAspect(aspect=text, evidence="said so", reason="r")

    persona = Persona(
        persona_id="u-1",
        category="Society_and_Culture",
        profile=[ProfileItem(id="1", category="c", text="A post.")],
    )
    task = Task(
        task_id="t",
        persona=persona,
        question_id="q1",
        question="Q?",
        category="Society_and_Culture",
    )
    dropped = imported(task)  # a user without published aspects: dropped, with the reason
    assert dropped.reason == "rubrics_none_imported" and "q1" in dropped.detail
    ours = [
        aspect("Keep every suggestion cheap"),
        aspect("Use numbered steps"),
        aspect("Mention local clubs"),
    ]
    theirs = [aspect("Give numbered steps in order"), aspect("Suggestions must stay cheap")]
    found = agreement(ours, theirs)
    assert (found.found, found.of, found.matches) == (2, 3, [2, 1, None])


def test_compare_matches_the_same_users_never_the_same_question_from_another_user(tmp_path):
    from public_releases import controlled

    from pipeline.audit.compare import match

    rows = controlled()[:6]
    same = [dict(r) for r in rows]
    assert len(match(rows, same)[0]) == 6
    # the same users with fewer posts (a top-k release): matched on persona_id and question
    fewer = [{**r, "profile": r["profile"][:1], "persona_id": f"p{k}"} for k, r in enumerate(rows)]
    ours = [{**r, "persona_id": f"p{k}"} for k, r in enumerate(rows)]
    shared, on = match(ours, fewer)
    assert len(shared) == 6 and on == "persona_id and question"
    # other users asking the same questions: nothing shared
    others = [{**r, "profile": [{"id": "x", "text": "Someone else entirely."}]} for r in rows]
    assert match(rows, others) == ([], "user and question")
