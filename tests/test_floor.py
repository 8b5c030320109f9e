"""The model-free quality floor (issue 26): degenerate text (too short, repeated lines, a looping
phrase), copying the prompt's data, answers off their question, and broken text (encoding,
template residue, another language) — dropped before any judge is asked, so a dropped pair
costs no judge call."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import build, write_config
from public_releases import controlled

from pipeline.checks import CHECKS, FilterConfig, off_question, prompt_copy, text_sanity
from pipeline.checks.degenerate import Settings, side, why
from pipeline.records import FilterRecord, Pair, Persona, ProfileItem, RubricAspect, Task
from pipeline.sim.responder import DEGRADED
from pipeline.store import StageFile

FLOOR = ("degenerate", "prompt_copy", "off_question", "bad_text")

JUDGES = {c.name for c in CHECKS if c.cost > 0}


def test_degenerate_answers_are_named_and_sound_prose_is_not():
    cfg = Settings()
    assert why(side("Short answer."), cfg) == ["too short"]
    repeated = "Keep the budget small.\n" * 5 + "Start with one lesson a week."
    assert why(side(repeated), cfg) == ["repeated lines", "looping"]
    assert why(side("the cat sat on the mat " * 20), cfg) == ["looping"]
    for row in controlled(couples=20):  # prose, lists, formal and casual answers: all sound
        assert why(side(row["chosen"]), cfg) == [] and why(side(row["rejected"]), cfg) == []


def test_planted_degenerate_answers_are_all_dropped_with_no_judge_call(
    tmp_path, sim_factory, sim_url
):
    url = sim_factory(degenerate_rate=0.3)
    result = build(write_config(tmp_path / "bad", url, personas={"per_category": 4}))
    records = list(StageFile(Path(result["run_dir"]), "filters", FilterRecord).read())
    planted = [
        r
        for r in records
        if len(set(r.pair.rejected.splitlines())) == 1 and len(r.pair.rejected.splitlines()) == 6
    ]
    assert planted and len(planted) < len(records)
    for r in planted:
        assert "degenerate" in r.reasons and not r.kept
        assert not JUDGES & set(r.checks) and not r.calls  # no judge was asked
    assert all("degenerate" not in r.reasons for r in records if r not in planted)
    sound = build(write_config(tmp_path / "ok", sim_url, personas={"per_category": 4}))
    kept = list(StageFile(Path(sound["run_dir"]), "filters", FilterRecord).read())
    assert all("degenerate" not in r.reasons for r in kept)


QUESTION = "How should I start learning watercolor painting as a retired engineer?"
POST = "I retired from the railway bureau last year and joined a group that paints the harbour."
ASPECT = "Tie the advice to the user's own retirement and their harbour painting group"
KEY_POINTS = [
    "Buy a small student set of watercolor paints and two round brushes first",
    "Practice washes and gradients for ten minutes every day before any picture",
]
SOUND = (
    "Since your harbour group meets weekly, bring a small watercolor set and two round "
    "brushes; practice washes for ten minutes a day at home, and ask the group which "
    "paper they like. Your engineer's patience with tolerances will help with layering."
)


def pair(chosen: str, rejected: str = SOUND, question: str = QUESTION) -> Pair:
    persona = Persona.model_construct(profile=[ProfileItem(id="p1", category="x", text=POST)])
    task = Task.model_construct(question=question, persona=persona, profile_ids=None)
    return Pair.model_construct(
        task=task,
        chosen=chosen,
        rejected=rejected,
        key_points=KEY_POINTS,
        narrative="",
        rubric_aspects=[RubricAspect.model_construct(aspect=ASPECT, evidence="[p1] 'joined'")],
    )


def floor_reasons(p: Pair, pairs: list[Pair] | None = None) -> list[str]:
    cfg = FilterConfig()
    out = []
    for c in CHECKS:
        if c.cost == 0 and c.name in {"prompt_copy", "off_question", "text_sanity"}:
            shared = c.prepare(pairs or [p], cfg) if c.prepare else None
            out += c.decide(c.measure(p, {}, shared), cfg)
    return out


def test_a_sound_answer_passes_the_whole_floor():
    assert floor_reasons(pair(SOUND)) == []


def test_an_answer_reciting_the_users_data_or_only_its_plan_is_dropped():
    recital = f"{ASPECT}. {POST} {ASPECT}."
    found = prompt_copy.measure(pair(recital), None, None)
    assert found.chosen_copied > 0.9 and found.rejected_copied == 0.0
    assert floor_reasons(pair(recital)) == ["prompt_copy"]
    only_plan = " ".join(f"{k}." for k in KEY_POINTS)
    assert prompt_copy.measure(pair(only_plan), None, None).chosen_copied_plan == 1.0
    assert floor_reasons(pair(only_plan)) == ["prompt_copy"]
    # a sound answer may state one key point verbatim among its own words
    uses_one = f"{KEY_POINTS[0]}. {SOUND}"
    assert 0 < prompt_copy.measure(pair(uses_one), None, None).chosen_copied_plan < 0.5
    assert floor_reasons(pair(uses_one)) == []


def test_broken_encoding_and_another_language_are_bad_text():
    mojibake = SOUND.replace("engineer's", "engineerâ€™s")
    assert text_sanity.measure(pair(mojibake), None, None).chosen.encoding
    assert floor_reasons(pair(mojibake)) == ["bad_text"]
    assert floor_reasons(pair(SOUND.replace("a day", "a day \ufffd"))) == ["bad_text"]
    german = (
        "Kaufen Sie zuerst einen kleinen Aquarellkasten und zwei runde Pinsel, und üben "
        "Sie jeden Tag zehn Minuten lang Lasuren, bevor Sie ein ganzes Bild malen."
    )
    found = text_sanity.measure(pair(german), None, None)
    assert (found.chosen.language, found.question_language) == ("de", "en")
    assert floor_reasons(pair(german))[:1] == ["bad_text"]  # (and off its English question)


def test_an_answer_off_its_question_is_dropped():
    other = "What is a cheap way to keep a small vegetable garden watered during summer heat?"
    garden = (
        "Start with a soaker hose on a timer along the vegetable rows, mulch the beds "
        "with straw, and water the garden early in the morning so little is lost to the "
        "summer heat."
    )
    pairs = [pair(SOUND), pair(garden, question=other)]
    assert floor_reasons(pair(DEGRADED), pairs) == ["off_question"]  # no word of the question
    swapped = pair(garden)  # the answer to the other question, asked under this one: it
    # shares a word with it ("start"), but fits the other question better
    index = off_question.prepare([*pairs, swapped], None)
    assert off_question.measure(swapped, None, index).chosen_rank == 2
    strict = FilterConfig(max_question_rank=1, max_question_rank_share=0.01)
    assert off_question.CHECK.decide(off_question.measure(swapped, None, index), strict)
    assert not off_question.CHECK.decide(off_question.measure(pairs[0], None, index), strict)


def test_a_degraded_run_loses_its_unhelpful_answers_to_the_floor_with_no_judge_call(
    tmp_path, sim_factory, sim_url
):
    result = build(
        write_config(tmp_path / "bad", sim_factory(degrade_rate=0.3), personas={"per_category": 4})
    )
    records = list(StageFile(Path(result["run_dir"]), "filters", FilterRecord).read())
    degraded = [r for r in records if r.pair.rejected == DEGRADED]
    assert degraded and len(degraded) < len(records)
    for r in degraded:
        assert "off_question" in r.reasons and not r.kept
        assert not JUDGES & set(r.checks) and not r.calls
    # a sound build loses nothing to the floor
    sound = build(write_config(tmp_path / "ok", sim_url, personas={"per_category": 4}))
    kept = list(StageFile(Path(sound["run_dir"]), "filters", FilterRecord).read())
    assert not [r for r in kept if set(FLOOR) & set(r.reasons)]


def test_code_an_answer_quotes_is_no_residue_and_a_french_question_is_owed_french():
    """Issue 38: residue is prb's own prompt markup and chat-template tokens, not Jinja,
    Handlebars or HTML an answer quotes; the language rule owes the question's own language
    even when the user's posts are in another one."""
    jinja = (
        "Put the greeting in your template as {{ user.name }} and loop with {% for item in "
        "cart %} ... {% endfor %}; Handlebars writes {{#if ok}} instead."
    )
    html = "Wrap the card in a div:\n<div>\n  <p>Hello</p>\n</div>\nthen style it."
    for text in (jinja, html):
        assert not text_sanity.measure(pair(text), None, None).chosen.residue, text
        assert "bad_text" not in floor_reasons(pair(text)), text  # (off this question, though)
    assert text_sanity.measure(pair("Answer: {{ question }}"), None, None).chosen.residue
    question = "Comment devrais-je commencer la peinture à l'aquarelle quand on est retraité ?"
    french = (
        "Commencez par une petite boîte d'aquarelle et deux pinceaux ronds, puis exercez-vous "
        "dix minutes par jour aux lavis avant de peindre un tableau entier."
    )
    found = text_sanity.measure(pair(french, question=question), None, None)
    assert found.question_language == "en" and found.own_language == "fr", found
    assert "bad_text" not in floor_reasons(pair(french, french, question=question))
    german = (
        "Kaufen Sie zuerst einen kleinen Aquarellkasten und zwei runde Pinsel, und üben "
        "Sie jeden Tag zehn Minuten lang Lasuren, bevor Sie ein ganzes Bild malen."
    )
    assert "bad_text" in floor_reasons(pair(german, french, question=question))


def test_the_language_reading_is_langids_own_only_cheaper():
    """Issue 39: the floor reads languages with langid's weights cast once (not per call) and
    each text once; the codes and confidences are exactly stock langid's."""
    from langid.langid import LanguageIdentifier, model

    stock = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    texts = [r[k] for r in controlled() for k in ("chosen", "rejected", "question")]
    texts += [
        "Pour un budget mensuel, notez chaque dépense pendant un mois puis fixez des plafonds.",
        "Für ein Monatsbudget schreiben Sie jede Ausgabe einen Monat lang auf und setzen Grenzen.",
        "Para un presupuesto mensual, anota cada gasto durante un mes y luego fija límites claros.",
    ]
    text_sanity.language.cache_clear()
    for text in texts:
        assert (text_sanity._identifier().instance2fv(text) == stock.instance2fv(text)).all()
        code, p = text_sanity.language(text, 1)
        want, want_p = stock.classify(text)
        assert (code, p) == (want, round(float(want_p), 4)), text
    assert {text_sanity.language(t, 1)[0] for t in texts[-3:]} == {"fr", "de", "es"}
    assert text_sanity.language.cache_info().hits >= 3  # read once, answered from memory after


def test_the_floor_words_and_mojibake_readings_are_the_libraries_own_only_cheaper():
    """Issue 39: off_question splits an answer into stems itself (bm25s.tokenize built three
    disabled progress bars per answer, 40% of the check's time) and text_sanity skips ftfy's
    mojibake search on pure-ASCII text (every pattern of it needs a character beyond ASCII);
    both give exactly what the libraries give."""
    import itertools

    import ftfy
    from ftfy.badness import BADNESS_RE, MOJIBAKE_CATEGORIES

    texts = [r[k] for r in controlled() for k in ("chosen", "rejected", "question")]
    texts += [
        "The painter's PAINTINGS: she paints, painted and will paint again; it's the 2nd time!",
        "Naïve café-goers — über-fans — don’t mind “quotes”; â€™ is mojibake, ÃƒÂ© too.",
        "a I of the and",
        "",
        "x_y snake_case 42 foo2bar   tabs\tand\nlines",
    ]
    for text in texts:
        want = off_question.tokenize(text, return_ids=False)[0]
        assert off_question.words(text) == [w for w in want if w], text
        assert text_sanity.side(text).encoding == ("\ufffd" in text or ftfy.is_bad(text)), text
    assert text_sanity.side(texts[-4]).encoding  # the mojibake one
    ascii_chars = [chr(i) for i in range(128)]
    for pattern in MOJIBAKE_CATEGORIES.values():  # no class of the heuristic admits ASCII
        assert not [c for c in ascii_chars if re.match(f"[{pattern}]", c)]
    for n in (1, 2, 3):  # nor does any of its patterns up to three characters
        assert not [
            s
            for s in map("".join, itertools.product(ascii_chars, repeat=n))
            if BADNESS_RE.search(s)
        ]
