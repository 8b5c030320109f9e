"""Reasoning output (issue 37): open models served by vLLM or llama.cpp put their thinking in
`<think>…</think>` inside the content or in a `reasoning_content` field. The call path keeps
it out of parsing and the quality floor and counts it in usage; the simulator plants both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config

from pipeline.calls import Unparseable, split_reasoning
from pipeline.llm.backends.openai import read_completion
from pipeline.llm.ratelimit import text_tokens
from pipeline.records import FilterRecord
from pipeline.store import StageFile


def completion(content: str, **message) -> dict:
    return {
        "choices": [
            {
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content, **message},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 40},
    }


@pytest.mark.parametrize(
    ("content", "reasoning", "answer"),
    [
        ("plain answer", "", "plain answer"),
        ('<think>a\nb</think>\n\n{"x": 1}', "a\nb", '{"x": 1}'),
        ("opened by the template</think>the answer", "opened by the template", "the answer"),
        ("<think>one</think> <think>two</think> end", "one\ntwo", "end"),
        # a tag inside the answer is the answer's text (issue 48: it cut the answer there)
        ("<think>one</think>mid<think>two</think> end", "one", "mid<think>two</think> end"),
        (
            "In HTML you might write <think> as a made-up tag.",
            "",
            "In HTML you might write <think> as a made-up tag.",
        ),
        ("<think>cut off while thinking", "cut off while thinking", ""),
    ],
)
def test_reasoning_is_split_from_the_answer(content, reasoning, answer):
    assert split_reasoning(content) == (reasoning, answer)


def test_a_completion_keeps_only_its_answer_and_counts_its_reasoning():
    content, _, tokens = read_completion(completion("<think>hmm, let me see</think>Yes."))
    assert content == "Yes." and tokens["reasoning_tokens"] > 0
    content, _, tokens = read_completion(completion("Yes.", reasoning_content="hmm, so"))
    assert content == "Yes." and tokens["reasoning_tokens"] == text_tokens("hmm, so") > 0
    reported = completion("Yes.", reasoning_content="hmm")
    reported["usage"]["completion_tokens_details"] = {"reasoning_tokens": 7}
    assert read_completion(reported)[2]["reasoning_tokens"] == 7
    content, _, tokens = read_completion(completion("No reasoning here."))
    assert "reasoning_tokens" not in tokens


def test_a_build_on_a_reasoning_model_releases_what_a_plain_one_does(
    tmp_path, sim_factory, sim_url
):
    """Every answer of the simulator carries reasoning (half in the content, half beside it)
    that would fail JSON parsing and the floor's repeated-line rule if it reached them: the
    build's records equal a plain build's, and usage counts the reasoning per stage."""
    thinking = sim_factory(reasoning_rate=1.0)
    runs = {}
    for name, url in (("plain", sim_url), ("thinking", thinking)):
        result = build(write_config(tmp_path / name, url, personas={"per_category": 3}))
        records = StageFile(Path(result["run_dir"]), "filters", FilterRecord).read()
        runs[name] = (
            [(r.pair.pair_id, r.pair.chosen, r.pair.rejected, r.kept, r.reasons) for r in records],
            result,
        )
    assert runs["thinking"][0] == runs["plain"][0] and runs["plain"][0]
    assert any(kept for *_, kept, _ in runs["plain"][0])
    usage = runs["thinking"][1]["usage"]
    for stage in ("rubrics", "pairs", "filters"):
        assert usage[stage]["reasoning_tokens"] > 0, stage
        assert not usage[stage]["failures"] and not usage[stage]["retries"], usage[stage]
    assert all("reasoning_tokens" not in u for u in runs["plain"][1]["usage"].values())
    assert "Let me think" not in json.dumps(
        [r for r, *_ in runs["thinking"][0]] + [c for _, c, *_ in runs["thinking"][0]]
    )


def test_an_answer_that_is_all_reasoning_is_unparseable():
    content, _, _ = read_completion(completion("<think>never finished"))
    from pipeline.llm.structured import parse_output

    with pytest.raises(Unparseable):
        parse_output(content, None)
