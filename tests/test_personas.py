"""The persona library: validation, `prb personas add/stats/validate`, seeded stratified sampling
and question assignment. Fixtures are small hand-written personas in tmp folders."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import PersonaConfig
from pipeline.personas.checks import validate
from pipeline.personas.files import load_personas, load_questions, load_taxonomy
from pipeline.personas.sampling import sample_personas as sample_by
from pipeline.records import Persona, Question
from pipeline.stages.questions import assign_questions

# the shipped library's categories (categories come from the data, not from the code)
CATEGORIES = ["Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"]


def sample_personas(pool, cfg: PersonaConfig, seed: int):
    return sample_by(pool, cfg.categories or CATEGORIES, cfg.per_category, seed)


REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "personas" / "library"
QUESTIONS = REPO / "personas" / "questions"
TAX = load_taxonomy()
runner = CliRunner()


def persona(pid: str, category: str = "Lifestyle_and_Personal_Development") -> dict:
    """A valid persona that resembles nothing in the library (texts carry the id)."""
    texts = [
        "Night shifts at the depot in Hull mean I cook at odd hours. What keeps well for {p}?",
        "Tried batch cooking last winter for {p} and binned half of it by Thursday.",
        "Is a slow cooker worth it when the flat is this small? Asking for {p}.",
        "Lentils, rice and frozen veg are my staples; how do I stop {p} meals tasting the same?",
        "My sister says a weekly plan would help {p}, but plans never survive my rota.",
        "Which spices are worth buying first for {p}, if I only get three?",
    ]
    return {
        "persona_id": pid,
        "category": category,
        "name": f"shift worker cooking on a rota ({pid})",
        "summary": "A depot night-shift worker in Hull who cooks at odd hours on little money.",
        "profile": [
            {"id": f"{pid}-p{k}", "category": category, "text": t.format(p=pid)}
            for k, t in enumerate(texts, 1)
        ],
        "preferences": [
            {
                "dimension": "constraints",
                "level": "tight_budget",
                "statement": "Cheap ingredients only, please.",
            },
            {
                "dimension": "prior_experience",
                "level": "tried_and_struggled",
                "statement": "Meal planning has failed for me before.",
            },
            {
                "dimension": "format",
                "level": "step_by_step",
                "statement": "Numbered steps suit me best.",
            },
            {"dimension": "tone", "level": "casual", "statement": "Talk to me like a mate."},
            {
                "dimension": "cultural_context",
                "level": "european",
                "statement": "I shop in ordinary UK supermarkets.",
            },
        ],
        "narrative": "Keep it cheap and simple, one step at a time, like a friend would.",
    }


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def fixture_records() -> list[dict]:
    other = persona("zz-002")
    other["profile"] = [
        {"id": f"zz-002-p{k}", "category": other["category"], "text": t}
        for k, t in enumerate(
            [
                "Our choir in Recife rehearses Thursdays; how do I warm up my voice properly?",
                "Professional singer for twenty years, so skip the basics about breathing.",
                "What's the evidence on steam inhalers for tired vocal cords?",
                "Bullet points please, I read these between rehearsals.",
                "Can you compare two vocal-health routines on their trade-offs?",
            ],
            1,
        )
    ]
    other["preferences"] = [
        {"dimension": d, "level": lv, "statement": f"My {d} is {lv}."}
        for d, lv in [
            ("expertise", "expert"),
            ("depth", "in_depth"),
            ("format", "bulleted_list"),  # contradicts zz-001's step_by_step
            ("values", "evidence_only"),
            ("cultural_context", "latin_american"),
        ]
    ]
    return [
        persona("zz-001"),
        other,
        {
            "question_id": "zz-q1",
            "category": "Lifestyle_and_Personal_Development",
            "question": "How do I plan a week of cheap meals?",
            "asked_by": ["zz-001", "zz-002"],
        },
    ]


# --- validation: each kind of bad record, with file, line and field -------------------------


def _break(records: list[dict], how: str) -> tuple[list[dict], int]:
    """Mutate a copy of the fixture one way; returns records and the bad record's line."""
    recs = copy.deepcopy(records)
    p = recs[0]
    if how == "duplicate_id":
        recs[1]["persona_id"] = "zz-001"
        return recs, 2
    if how == "empty_text":
        p["profile"][1]["text"] = "   "
    elif how == "overlong_text":
        p["preferences"][0]["statement"] = "Cheap, please. " * 30
    elif how == "unsafe_category":
        p["category"] = "Food/Drink"  # a category names a release folder
    elif how == "unsafe_item_id":
        p["profile"][2]["id"] = "zz/../p3"
    elif how == "unknown_dimension":
        p["preferences"][1]["dimension"] = "humour"
    elif how == "unknown_level":
        p["preferences"][1]["level"] = "sometimes"
    elif how == "copies_preference":
        p["profile"][3]["text"] = "Honestly: numbered steps suit me best. Anyway, what about rice?"
    elif how == "few_profile_items":
        p["profile"] = p["profile"][:3]
    elif how == "missing_field":
        del p["profile"]
    elif how == "repeated_dimension":
        p["preferences"][4] = {"dimension": "tone", "level": "formal", "statement": "Be formal."}
    elif how == "near_duplicate":
        twin = copy.deepcopy(p)
        twin["persona_id"] = "zz-009"
        for k, item in enumerate(twin["profile"], 1):
            item["id"] = f"zz-009-p{k}"
        twin["profile"][0]["text"] = twin["profile"][0]["text"].replace("Hull", "Grimsby")
        recs.insert(2, twin)
        return recs, 3
    elif how == "unknown_asker":
        recs[2]["asked_by"].append("nobody-7")
        return recs, 3
    return recs, 1


CASES = [
    ("duplicate_id", "persona_id", "duplicate persona id 'zz-001'"),
    ("empty_text", "profile.1.text", "is empty"),
    ("overlong_text", "preferences.0.statement", "chars (max 200)"),
    ("unsafe_category", "category", "category 'Food/Drink' is not a safe name"),
    ("unsafe_item_id", "profile.2.id", "has characters outside"),
    ("unknown_dimension", "preferences.1.dimension", "unknown dimension 'humour'"),
    ("unknown_level", "preferences.1.level", "unknown level 'sometimes' of prior_experience"),
    ("copies_preference", "profile.3.text", "copies preferences.2.statement nearly verbatim"),
    ("few_profile_items", "profile", "has 3 items (need 5-12)"),
    ("missing_field", "profile", "Field required"),
    ("repeated_dimension", "preferences.4.dimension", "'tone' already stated in preferences.3"),
    ("near_duplicate", "profile", "near-duplicate of persona 'zz-001'"),
    ("unknown_asker", "asked_by.2", "unknown persona 'nobody-7'"),
]


@pytest.mark.parametrize("how,field,message", CASES, ids=[c[0] for c in CASES])
def test_validate_names_file_line_and_field_and_changes_nothing(tmp_path, how, field, message):
    good = write_jsonl(tmp_path / "good.jsonl", fixture_records())
    assert validate([good], TAX).issues == []
    records, line = _break(fixture_records(), how)
    bad = write_jsonl(tmp_path / "bad.jsonl", records)
    before = bad.read_bytes()
    report = validate([bad], TAX)
    hits = [i for i in report.errors if i.field == field and message in i.message]
    assert hits, [str(i) for i in report.issues]
    assert hits[0].where == f"{bad}:{line}"
    assert f"{bad}:{line}" in str(hits[0]) and field in str(hits[0])

    result = runner.invoke(app, ["personas", "validate", str(bad)])
    assert result.exit_code == 1
    assert "invalid" in result.output and "bad.jsonl" in result.output
    assert bad.read_bytes() == before


def test_broken_json_and_yaml_lines_are_reported(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(persona("zz-001")) + "\n{not json\n", encoding="utf-8")
    report = validate([bad], TAX)
    assert any(i.where == f"{bad}:2" and "broken JSON" in i.message for i in report.errors)
    assert len(report.personas) == 1  # the good line is still checked

    import yaml

    recs = fixture_records()
    recs[1]["preferences"][0]["level"] = "lavish"
    doc = tmp_path / "bad.yaml"
    doc.write_text(yaml.safe_dump(recs, sort_keys=False), encoding="utf-8")
    [issue] = validate([doc], TAX).errors
    line = doc.read_text().splitlines()[issue_line(issue) - 1]
    assert "persona_id: zz-002" in line and issue.field == "preferences.0.level"


def issue_line(issue) -> int:
    return int(issue.where.rsplit(":", 1)[1])


def test_shipped_library_passes_validate_and_meets_the_issue():
    result = runner.invoke(app, ["personas", "validate"])
    assert result.exit_code == 0, result.output
    assert "0 errors, 0 warnings" in result.output
    personas = load_personas([LIBRARY])
    questions = load_questions([QUESTIONS])
    by_cat = Counter(p.category for p in personas)
    assert all(by_cat[c] >= 30 for c in CATEGORIES)
    assert all(len(p.profile) >= 5 for p in personas)
    assert all(Counter(q.category for q in questions)[c] >= 60 for c in CATEGORIES)
    # questions asked by several personas whose preferences contradict (validate warns if not)
    assert sum(len(q.asked_by) > 1 for q in questions) >= 30


def test_stats_covers_every_cell_of_the_shipped_library():
    result = runner.invoke(app, ["personas", "stats", "--strict"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "all 27 category × dimension cells covered" in result.output
    for dim in TAX.dimensions:
        assert dim in result.output


def test_stats_shows_gaps(tmp_path):
    lib = write_jsonl(tmp_path / "lib.jsonl", fixture_records()[:2])
    qs = write_jsonl(tmp_path / "qs.jsonl", fixture_records()[2:])
    args = ["personas", "stats", "--library", str(lib), "--questions", str(qs)]
    result = runner.invoke(app, [*args, "--strict"], env={"COLUMNS": "160"})
    assert result.exit_code == 1
    # categories come from the data: the gaps are those of the categories the library holds
    assert "1 of 9 cells uncovered" in result.output
    assert "Lifestyle_and_Personal_Development×goals" in result.output
    assert "Art_and_Entertainment" not in result.output


# --- add ---------------------------------------------------------------------------------------


@pytest.fixture
def library_copy(tmp_path):
    lib, qs = tmp_path / "library", tmp_path / "questions"
    shutil.copytree(LIBRARY, lib)
    shutil.copytree(QUESTIONS, qs)
    return lib, qs


def digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.iterdir()))).hexdigest()


def test_add_appends_to_the_category_files(tmp_path, library_copy):
    lib, qs = library_copy
    new = write_jsonl(tmp_path / "new.jsonl", fixture_records())
    target = lib / "lifestyle_and_personal_development.jsonl"
    before = target.read_text().splitlines()
    result = runner.invoke(
        app, ["personas", "add", str(new), "--library", str(lib), "--questions", str(qs)]
    )
    assert result.exit_code == 0, result.output
    after = target.read_text().splitlines()
    assert after[: len(before)] == before and len(after) == len(before) + 2
    assert Persona.model_validate_json(after[-1]).persona_id == "zz-002"
    added_q = Question.model_validate_json(
        (qs / "lifestyle_and_personal_development.jsonl").read_text().splitlines()[-1]
    )
    assert added_q.question_id == "zz-q1"
    assert "source" not in json.loads(after[-1])  # library style: defaults left out
    assert validate([lib, qs], TAX).errors == []


@pytest.mark.parametrize("conflict", ["library_id", "near_duplicate_of_library", "bad_level"])
def test_add_refuses_the_whole_file(tmp_path, library_copy, conflict):
    lib, qs = library_copy
    records = fixture_records()
    shipped = json.loads((LIBRARY / "society_and_culture.jsonl").read_text().splitlines()[0])
    if conflict == "library_id":
        records[1]["persona_id"] = shipped["persona_id"]
    elif conflict == "near_duplicate_of_library":
        twin = copy.deepcopy(shipped)
        twin["persona_id"] = "zz-003"
        for k, item in enumerate(twin["profile"], 1):
            item["id"] = f"zz-003-p{k}"
        records.append(twin)
    else:
        records[1]["preferences"][0]["level"] = "lavish"
    new = write_jsonl(tmp_path / "new.jsonl", records)
    before = digest(lib), digest(qs)
    result = runner.invoke(
        app, ["personas", "add", str(new), "--library", str(lib), "--questions", str(qs)]
    )
    assert result.exit_code == 1
    assert "refused" in result.output and "new.jsonl" in result.output
    assert (digest(lib), digest(qs)) == before  # not even the good records went in


# --- sampling and questions --------------------------------------------------------------------


def _fixture_pool() -> list[Persona]:
    """Per category: six novices that agree on everything, two experts."""
    out = []
    for c in CATEGORIES:
        for i in range(8):
            level = "expert" if i < 2 else "novice"
            out.append(
                Persona(
                    persona_id=f"{c[:2]}-{i}",
                    category=c,
                    profile=[{"id": f"{c[:2]}-{i}-p1", "category": c, "text": "hi"}],
                    preferences=[
                        {"dimension": "expertise", "level": level, "statement": level},
                        {"dimension": "tone", "level": "casual", "statement": "casual"},
                    ],
                )
            )
    return out


def test_sampling_is_seeded_and_sized_by_config():
    library = load_personas([LIBRARY])
    cfg = PersonaConfig(per_category=5)
    a = [p.persona_id for p in sample_personas(library, cfg, seed=7)]
    assert a == [p.persona_id for p in sample_personas(library, cfg, seed=7)]
    assert len(a) == len(set(a)) == 15
    samples = {tuple(p.persona_id for p in sample_personas(library, cfg, s)) for s in range(6)}
    assert len(samples) > 1  # the seed matters
    one = sample_personas(library, PersonaConfig(per_category=3, categories=[CATEGORIES[1]]), 0)
    assert {p.category for p in one} == {CATEGORIES[1]} and len(one) == 3


def test_sampling_is_stratified_over_levels():
    pool = _fixture_pool()
    for seed in range(12):
        sample = sample_personas(pool, PersonaConfig(per_category=2), seed)
        for c in CATEGORIES:
            levels = {p.preferences[0].level for p in sample if p.category == c}
            # 6 of 8 are novices, yet two draws always hold both contradicting levels
            assert levels == {"novice", "expert"}, (seed, c)


def plain_greedy(personas, cfg: PersonaConfig, seed: int) -> list[str]:
    """The sampler's definition, O(n * per_category): each next pick has the least crowded
    preference levels (then dimensions), ties in seeded shuffle order."""
    import random

    rng = random.Random(f"personas:{seed}")
    out = []
    for category in cfg.categories or CATEGORIES:
        pool = sorted((p for p in personas if p.category == category), key=lambda p: p.persona_id)
        rng.shuffle(pool)
        levels, dims = Counter(), Counter()

        def crowding(p, levels=levels, dims=dims):
            n = max(1, len(p.preferences))
            return (
                sum(levels[(x.dimension, x.level)] for x in p.preferences) / n,
                sum(dims[x.dimension] for x in p.preferences) / n,
            )

        for _ in range(min(cfg.per_category, len(pool))):
            i = min(range(len(pool)), key=lambda i: (crowding(pool[i]), i))
            best = pool.pop(i)
            out.append(best.persona_id)
            levels.update((x.dimension, x.level) for x in best.preferences)
            dims.update(x.dimension for x in best.preferences)
    return out


def test_sampler_picks_exactly_what_the_plain_greedy_picks():
    # the library plus renamed copies: many personas share preference levels, as in a large
    # synthetic or imported source
    library = load_personas([LIBRARY])
    copies = [
        p.model_copy(update={"persona_id": f"{p.persona_id}-c{k}"})
        for k in range(3)
        for p in library
    ]
    pool = library + copies
    for seed in range(3):
        for per_category in (7, 60, 200):
            cfg = PersonaConfig(per_category=per_category)
            got = [p.persona_id for p in sample_personas(pool, cfg, seed)]
            assert got == plain_greedy(pool, cfg, seed), (seed, per_category)


def test_a_build_samples_from_a_scanned_pool_and_reads_back_only_its_picks(tmp_path):
    import yaml

    from pipeline.personas.sources import source_for

    # the shipped JSONL library, plus a YAML file: both ways of reading a pick back
    shutil.copytree(LIBRARY, tmp_path / "lib")
    extra = [persona(f"yaml-{i}", CATEGORIES[i % 3]) for i in range(6)]
    (tmp_path / "lib" / "extra.yaml").write_text(yaml.safe_dump(extra), encoding="utf-8")
    whole = load_personas([tmp_path / "lib"])
    for seed, per_category in ((0, 5), (4, 40)):
        cfg = PersonaConfig(library=[str(tmp_path / "lib")], per_category=per_category)
        got = list(source_for(cfg).sample(cfg, seed))
        assert got == sample_personas(whole, cfg, seed)  # same records, same order
    assert any(p.persona_id.startswith("yaml-") for p in got)


def test_a_library_file_changed_under_the_build_is_named(tmp_path):
    from pipeline.personas.files import PersonaFileError
    from pipeline.personas.sampling import read_back, scan_pool

    lib = write_jsonl(tmp_path / "lib.jsonl", [persona(f"p-{i}") for i in range(3)])
    pool = scan_pool([lib])
    write_jsonl(lib, [persona("other")] + [persona(f"p-{i}") for i in range(3)])
    with pytest.raises(PersonaFileError, match=r"lib\.jsonl:2: changed while the build"):
        list(read_back(pool[1:]))


def test_questions_never_repeat_a_persona_question_pair():
    library = load_personas([LIBRARY])
    pool = load_questions([QUESTIONS])
    sample = sample_personas(library, PersonaConfig(per_category=8), seed=3)
    tasks = list(assign_questions(sample, pool, per_persona=3, seed=3))
    assert len(tasks) == 72
    assert len({(t.persona.persona_id, t.question.lower()) for t in tasks}) == 72
    assert tasks == list(assign_questions(sample, pool, per_persona=3, seed=3))
    own = {(q.question_id, a) for q in pool for a in q.asked_by}
    for t in tasks:  # a persona asks its own questions first, all of its category
        assert t.category == t.persona.category
    first = [t for i, t in enumerate(tasks) if i % 3 == 0]
    assert all((t.question_id, t.persona.persona_id) in own for t in first)

    p = sample[0]
    same = [
        Question(
            question_id="x1", category=p.category, question="Same words?", asked_by=[p.persona_id]
        ),
        Question(question_id="x2", category=p.category, question="  same WORDS?"),
    ]
    assert len(list(assign_questions([p], same, per_persona=5, seed=0))) == 1
