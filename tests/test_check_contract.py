"""A check is a rule and a report (issue 40): its released sub-fields are read off its result
model, its call names, prompt tasks and cost off its asks, so neither is written twice."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest

from pipeline.checks import CHECKS
from pipeline.checks.base import Ask, Check, Released, Report, both, released, shown
from pipeline.records import Pair, Record, Task


class Side(Record):
    words: int


class Result(Record):
    score: Annotated[float | None, Released("kind_score")] = None  # float -> float64
    rank: Annotated[int | None, Released()] = None  # named as the field; int -> int32
    verdict: Annotated[Literal["A", "B", "tie"], Released("kind_verdict")] = "tie"
    note: Annotated[str, Released(dtype="large_string")] = ""  # a dtype given wins
    hidden: float = 0.0  # not marked: recorded, not released
    chosen: Side = Side(words=3)

    chosen_words = released("int32", lambda r: r.chosen.words)

    @released("bool")
    def decisive(self) -> bool:
        return self.verdict != "tie"


def _check(**kw) -> Check:
    return Check(
        name="kind",
        settings=Record,
        result=kw.pop("result", Result),
        measure=lambda *_: None,
        decide=lambda *_: [],
        report=Report(),
        **kw,
    )


def test_released_subfields_are_read_off_the_result_model_in_order():
    check = _check()
    assert check.features == {
        "kind_score": "float64",
        "rank": "int32",
        "kind_verdict": "string",
        "note": "large_string",
        "chosen_words": "int32",
        "decisive": "bool",
    }
    r = Result(score=0.25, rank=2, verdict="B", note="n", hidden=1.0, chosen=Side(words=7))
    assert check.released(r) == {
        "kind_score": 0.25,
        "rank": 2,
        "kind_verdict": "B",
        "note": "n",
        "chosen_words": 7,
        "decisive": True,
    }
    # a computed value is released, never stored: the filter records keep their JSON
    assert set(r.model_dump()) == {"score", "rank", "verdict", "note", "hidden", "chosen"}
    assert check.view(r) == check.released(r)  # no top-level columns declared


def test_a_released_field_whose_dtype_cannot_be_read_off_its_type_fails_at_load():
    class Listy(Record):
        flags: Annotated[list[bool] | None, Released()] = None

    with pytest.raises(TypeError, match=r"Listy\.flags: give Released\(dtype=\.\.\.\)"):
        _check(result=Listy)

    class Typed(Record):
        flags: Annotated[list[bool] | None, Released(dtype="string")] = None

    assert _check(result=Typed).features == {"flags": "string"}


def test_call_names_tasks_and_cost_follow_from_the_asks():
    def only_with(pair, prepared):  # asked only of the pairs `prepare` chose
        return {"question": pair.task.question} if pair.pair_id in prepared else None

    check = _check(
        asks=(
            Ask("one_ab", "judge_one", lambda pair, _: {"q": 1, **shown(pair, "ab")}),
            Ask("one_ba", "judge_one", lambda pair, _: {"q": 1, **shown(pair, "ba")}),
            Ask("two", "judge_two", only_with),
        )
    )
    assert (check.cost, check.tasks) == (3, ("judge_one", "judge_two"))
    assert check.call_names == ("one_ab", "one_ba", "two")
    pair = Pair.model_construct(
        pair_id="p1", task=Task.model_construct(question="Q?"), chosen="C", rejected="R"
    )
    calls = check.calls(pair, prepared=set())
    assert [c.name for c in calls] == ["one_ab", "one_ba"]  # `two` not asked of this pair
    assert calls[0].variables == {"q": 1, "answer_a": pair.chosen, "answer_b": pair.rejected}
    assert calls[1].variables == {"q": 1, "answer_a": pair.rejected, "answer_b": pair.chosen}
    assert [c.name for c in check.calls(pair, prepared={pair.pair_id})][-1] == "two"
    assert _check().cost == 0 and _check().calls(pair) == []  # model-free


def test_each_bundled_check_releases_its_own_names_and_documents_what_it_has():
    """A released sub-field belongs to one check (the `pair_checks` struct would keep only the
    last of two alike), a check's report documents exactly its settings, and the preflight
    renders every prompt task it calls."""
    owner: dict[str, str] = {}
    for c in CHECKS:
        for name in c.features:
            assert name not in owner, f"{name}: released by {owner.get(name)} and {c.name}"
            owner[name] = c.name
        assert set(c.report.docs) == set(c.settings.model_fields), c.name
        assert set(c.samples) == set(c.tasks), c.name


def test_a_sides_figure_reads_both_answers_or_nothing():
    read = both("chosen_x", "rejected_x")
    assert read({"chosen_x": 0.0, "rejected_x": 1}) == (0.0, 1)  # a zero is a value
    assert read({"chosen_x": 0.5, "rejected_x": None}) is None  # one side missing: no pair
    assert read({}) is None
