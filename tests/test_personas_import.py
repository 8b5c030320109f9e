"""Import of LaMP-QA / Personalized-RewardBench-style records through `datasets`, from local
JSON, JSONL and Parquet fixtures written by the tests, and a build that samples from them."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from conftest import build, write_config

from pipeline.personas.files import PersonaFileError
from pipeline.personas.importer import load_external
from pipeline.records import Persona, Task

CATEGORIES = ["Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"]
# a word of each user's own (a plan that names nothing of its user is refused)
HOBBY = {"c0u0": "pottery", "c0u1": "fencing", "c1u0": "baking", "c1u1": "rowing"}
HOBBY |= {"c2u0": "chess", "c2u1": "birding"}


def rows() -> list[dict]:
    """Two users per category; user u0 of Art asks two questions (same profile)."""
    out = []
    for c, category in enumerate(CATEGORIES):
        for u in range(2):
            profile = [
                {
                    "id": f"c{c}u{u}-{k}",
                    "category": category,
                    "text": f"post {k} of c{c}u{u} on {HOBBY[f'c{c}u{u}']}",
                }
                for k in range(3)
            ]
            profile[2]["category"] = None  # falls back to the record's category
            out.append(
                {
                    "id": f"q-c{c}u{u}",
                    "question": f"Question of c{c}u{u}?",
                    "profile": profile,
                    "narrative": f"c{c}u{u} wants short answers.",
                    "rubric_aspects": [
                        {"aspect": "Be brief", "evidence": f"[c{c}u{u}-0]", "reason": "said so"}
                    ],
                    "category": category,
                }
            )
    again = json.loads(json.dumps(out[0]))
    again.update(id="q-c0u0-b", question="Second question of c0u0?", narrative="later")
    return [*out, again]


def write(tmp_path: Path, records: list[dict], fmt: str) -> Path:
    path = tmp_path / f"users.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif fmt == "json":
        path.write_text(json.dumps(records))
    else:
        datasets.Dataset.from_list(records).to_parquet(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_import_maps_fields(tmp_path, fmt):
    personas, questions = load_external(str(write(tmp_path, rows(), fmt)))
    assert len(personas) == 6 and len(questions) == 7
    by_id = {p.persona_id: p for p in personas}
    q = next(q for q in questions if q.question_id == "q-c1u1")
    p = by_id[q.asked_by[0]]
    assert q.question == "Question of c1u1?" and q.category == CATEGORIES[1]
    assert q.narrative == "c1u1 wants short answers."
    assert [a.model_dump() for a in q.rubric_aspects] == [
        {"aspect": "Be brief", "evidence": "[c1u1-0]", "reason": "said so"}
    ]
    assert p.category == CATEGORIES[1] and p.narrative == "c1u1 wants short answers."
    assert [(i.id, i.text) for i in p.profile] == [
        (f"c1u1-{k}", f"post {k} of c1u1 on rowing") for k in range(3)
    ]
    assert {i.category for i in p.profile} == {CATEGORIES[1]}
    assert p.source == f"import:users.{fmt}" and p.preferences == []
    # the same user asking twice is one persona with two questions
    twice = [q for q in questions if by_id[q.asked_by[0]].profile[0].id == "c0u0-0"]
    assert {q.question_id for q in twice} == {"q-c0u0", "q-c0u0-b"}
    assert len({q.asked_by[0] for q in twice}) == 1


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda r: r.pop("question"), "missing required field(s) question"),
        (lambda r: r.update(profile=[]), "missing required field(s) profile"),
        (lambda r: r.update(category=None), "missing required field(s) category"),
        (lambda r: r.update(category="Sports/Games"), "category 'Sports/Games' is not a safe"),
        (lambda r: r["profile"][1].update(text=""), "field profile/rubric_aspects text"),
    ],
)
def test_import_rejects_bad_records(tmp_path, change, message):
    records = rows()
    change(records[3])
    with pytest.raises(PersonaFileError) as err:
        load_external(str(write(tmp_path, records, "jsonl")))
    assert "users.jsonl: record 4 (id 'q-c1u1')" in str(err.value)
    assert message in str(err.value)


def test_import_errors_name_the_source(tmp_path):
    with pytest.raises(PersonaFileError, match="no such file"):
        load_external(str(tmp_path / "missing.jsonl"))
    (tmp_path / "users.csv").write_text("a,b\n")
    with pytest.raises(PersonaFileError, match="expected .json, .jsonl or .parquet"):
        load_external(str(tmp_path / "users.csv"))
    # the hub path exists; offline (as in tests) it fails with a clear message, no download
    with pytest.raises(PersonaFileError, match="hf:nobody/no-such-set: cannot load"):
        load_external("hf:nobody/no-such-set")


def test_build_samples_from_an_imported_source(tmp_path, sim_url):
    source = write(tmp_path, rows(), "parquet")
    config = write_config(tmp_path, sim_url, personas={"source": str(source), "per_category": 1})
    result = build(config)
    run_dir = Path(result["run_dir"])
    sampled = [Persona.model_validate_json(line) for line in (run_dir / "personas.jsonl").open()]
    tasks = [Task.model_validate_json(line) for line in (run_dir / "questions.jsonl").open()]
    assert len(sampled) == 3 and {p.category for p in sampled} == set(CATEGORIES)
    assert all(p.source == "import:users.parquet" for p in sampled)
    # each imported user asks their own question(s), never someone else's
    for t in tasks:
        assert t.question.startswith(("Question of ", "Second question of "))
        assert t.question.split(" of ")[1].rstrip("?") == t.persona.profile[0].id.split("-")[0]
    assert result["funnel"]["personas"] == 3
