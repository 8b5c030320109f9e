"""Text sanity, model-free (issue 26's quality floor): an answer with broken encoding (mojibake
such as `â€™`, or U+FFFD replacement characters), with residue of the prompt or of a chat
template (`<key_points>`, `{{`, `<|im_end|>`, `[INST]`), or written in another language than
its question. Each is a generation fault, not a personal-fit difference, and each alone can
tell chosen from rejected.

Encoding is ftfy's mojibake heuristic; the language is langid.py's (deterministic, offline,
its model inside the package), compared only where both texts are long and clear enough to
say: the question alone is often too short to read."""

from __future__ import annotations

import functools
import re

from pydantic import Field

from pipeline.checks.base import Check, Figure, Report, released
from pipeline.paths import DATA
from pipeline.records import Pair, Record


def _prompt_markup() -> tuple[list[str], list[str]]:
    """prb's own prompt markup, read from its prompt files: the data-block tags (`<profile>`,
    `<key_points>`, …) and the template variables (`{{ question }}`, …) that leak into an
    answer when a model echoes its prompt. Jinja or HTML an answer quotes for its reader
    (`{{ user.name }}`, `{% for %}`, `<div>`) is not prb's and is no residue."""
    tags: set[str] = set()
    names: set[str] = set()
    for path in sorted((DATA / "prompts").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        tags |= set(re.findall(r"</?([a-z_]+)>", text))
        names |= set(re.findall(r"\{\{-?\s*([a-z_]+)", text))
    # loop variables (`{{ p.text }}`, `{{ item }}`) are too generic to be prb's alone
    return sorted(tags), sorted(n for n in names if len(n) > 2 and n not in ("item", "loop"))


_TAGS, _VARS = _prompt_markup()
# prb's data tags anywhere, its template variables, the chat-template special tokens of the
# model families prb is run with, and a line that is nothing but an answer wrapper
# (`<answer>`, `</response>`: the local model wraps its answers so)
RESIDUE = re.compile(
    rf"</?({'|'.join(_TAGS)})>"
    rf"|\{{\{{-?\s*({'|'.join(_VARS)})\b"
    r"|<\|[a-z_]{2,20}\|>|\[/?INST\]|<</?SYS>>"
    r"|^[ \t]*</?(answer|response)>[ \t]*$",
    re.I | re.M,
)
MIN_WORDS = 12  # fewer words than this: no language is read from the text
QUESTION_WORDS = 6  # a question alone is read from this many words (confident readings only)


class Settings(Record):
    min_language_confidence: float = Field(0.95, gt=0, le=1)
    drop_bad_text: bool = True


class Side(Record):
    encoding: bool  # mojibake or replacement characters
    residue: str | None  # the first prompt or template residue found
    language: str | None  # langid's code, None: too short to say
    language_p: float | None  # langid's confidence in it


class Result(Record):
    question_language: str | None  # the question read with the user's first posts
    question_language_p: float | None
    chosen: Side
    rejected: Side
    # the question read alone (from QUESTION_WORDS words): a French question from a user who
    # posts in English is owed a French answer
    own_language: str | None = None
    own_language_p: float | None = None

    @released("bool")
    def chosen_bad_text(self) -> bool:
        return bool(why(self.chosen, self))

    @released("bool")
    def rejected_bad_text(self) -> bool:
        return bool(why(self.rejected, self))


@functools.cache
def _identifier():
    import numpy as np
    from langid.langid import LanguageIdentifier, model
    from scipy.sparse import csr_matrix

    class Sparse(LanguageIdentifier):
        """langid's classifier, reading only the weights of the features a text has: a text
        has a few hundred of the 7,480, and langid multiplies all of them (its float32
        weights cast to float64 anew each time). The same products without the zero ones:
        on 2,000 answers and questions of a simulated build every reading was bit-identical
        to langid's (tests/test_floor.py holds it to that), 25x faster."""

        def nb_classprobs(self, fv):
            present = np.flatnonzero(fv)
            return fv[present].astype(np.float64) @ self.nb_ptc[present] + self.nb_pc

        def instance2fv(self, text):
            """langid's feature counts: its automaton walked byte by byte as langid does, the
            states counted by numpy and mapped to their features by one sparse product, not a
            dict of lists per state. The same counts. (Its transition table as a list indexes
            15% faster but holds 61 MB for the process's life: not worth it.)"""
            state, seen = 0, []
            nextmove, append = self.tk_nextmove, seen.append
            for letter in text.encode("utf8") if isinstance(text, str) else text:
                state = nextmove[(state << 8) + letter]
                append(state)
            counts = np.bincount(np.asarray(seen, dtype=np.int64), minlength=self.emits.shape[0])
            return (self.emits.T @ counts).astype(np.uint32)

    found = Sparse.from_modelstring(model, norm_probs=True)
    found.nb_ptc = found.nb_ptc.astype(np.float64)
    emits = [(state, i) for state, out in found.tk_output.items() for i in out]
    found.emits = csr_matrix(  # state -> the features it counts (a repeat counts twice)
        (np.ones(len(emits), np.int64), tuple(zip(*emits, strict=True))),
        shape=(len(found.tk_nextmove) >> 8, found.nb_numfeats),
    )
    return found


@functools.lru_cache(maxsize=8192)  # persona_swap: each answer is in two pairs
def language(text: str, min_words: int = MIN_WORDS) -> tuple[str | None, float | None]:
    if len(text.split()) < min_words:
        return None, None
    code, p = _identifier().classify(text)
    return code, round(float(p), 4)


def side(text: str) -> Side:
    import ftfy

    found = RESIDUE.search(text)
    code, p = language(text)
    return Side(
        # every pattern of ftfy's mojibake heuristic needs a character beyond ASCII
        encoding="\ufffd" in text or (not text.isascii() and ftfy.is_bad(text)),
        residue=found.group(0) if found else None,
        language=code,
        language_p=p,
    )


def measure(pair: Pair, _: object, __: object) -> Result:
    # the question with the user's own words: a longer text of the language the answer owes
    code, p = language(" ".join([pair.task.question, *(x.text for x in pair.task.profile[:3])]))
    own, own_p = language(pair.task.question, QUESTION_WORDS)
    return Result(
        question_language=code,
        question_language_p=p,
        chosen=side(pair.chosen),
        rejected=side(pair.rejected),
        own_language=own,
        own_language_p=own_p,
    )


def why(s: Side, r: Result, confidence: float = Settings().min_language_confidence) -> list[str]:
    out = ["broken encoding"] if s.encoding else []
    out += ["template residue"] if s.residue else []
    # read as before (the question with its user's posts), the question's own language is
    # owed too: "other language" only when the answer is surely in neither
    sure = (s.language_p or 0) >= confidence and (r.question_language_p or 0) >= confidence
    own = r.own_language if (r.own_language_p or 0) >= confidence else None
    if sure and s.language not in (r.question_language, own):
        out.append("other language")
    return out


def decide(r: Result, s: Settings) -> list[str]:
    c = s.min_language_confidence
    bad = why(r.chosen, r, c) or why(r.rejected, r, c)
    return ["bad_text"] if s.drop_bad_text and bad else []


CHECK = Check(
    name="text_sanity",
    floor=True,
    order=34,
    settings=Settings,
    result=Result,
    measure=measure,
    decide=decide,
    report=Report(
        about="whether each answer has broken encoding, prompt or template residue, or another "
        "language than its question",
        docs={
            "min_language_confidence": "langid's confidence needed to name a text's language:",
            "drop_bad_text": "drop a pair where an answer has broken encoding, prompt or template "
            "residue, or is in another language than its question",
        },
        figures=(
            Figure(
                "bad_text",
                "pairs where an answer has bad text",
                lambda v: (
                    None
                    if v.get("chosen_bad_text") is None
                    else float(v["chosen_bad_text"] or v["rejected_bad_text"])
                ),
                fmt="{:.1%}",
                plot=False,
            ),
        ),
        severity=lambda r: 3.0 * (r.chosen_bad_text + r.rejected_bad_text),
    ),
)
