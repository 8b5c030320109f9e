"""Structured outputs (issue 16): each JSON task sends its output schema in the form the
endpoint understands, the simulator refuses a malformed one as OpenAI does (so these tests
prove the request's shape), and the form is part of the cache key and the manifest."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from conftest import build, write_config

from pipeline.config import ModelConfig
from pipeline.llm import LLM, response_format, strict_schema
from pipeline.llm.cache import ResponseCache
from pipeline.llm.prompts import load_prompt
from pipeline.records import BlindOutput, PlannerOutput, QualityOutput

MODES = ("json_schema", "json_object_schema", "json_object", "none")


def nodes(node):
    """Every schema node (dict) inside a schema."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from nodes(v)
    elif isinstance(node, list):
        for v in node:
            yield from nodes(v)


def objects(node):
    """Every object schema (with properties) inside a schema."""
    return [n for n in nodes(node) if n.get("type") == "object" and "properties" in n]


def test_each_mode_sends_the_form_its_endpoint_understands():
    strict = response_format(PlannerOutput, "json_schema")
    assert strict["type"] == "json_schema" and strict["json_schema"]["strict"] is True
    assert strict["json_schema"]["name"] == "PlannerOutput"
    schema = strict["json_schema"]["schema"]
    for obj in objects(schema):  # every object closed, every field required (nested ones too)
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    assert "maxLength" not in json.dumps(schema) and "minItems" not in json.dumps(schema)
    assert (
        "rationale"
        in response_format(QualityOutput, "json_schema")["json_schema"]["schema"]["required"]
    )  # optional in pydantic, required in strict mode
    grammar = response_format(PlannerOutput, "json_object_schema")
    assert grammar["type"] == "json_object"
    text = json.dumps(grammar["schema"])
    strings = [n for n in nodes(grammar["schema"]) if n.get("type") == "string"]
    lists = [n for n in nodes(grammar["schema"]) if n.get("type") == "array"]
    assert strings and all("maxLength" in n for n in strings)  # bounded for a small model
    assert lists and all(n["maxItems"] <= 8 for n in lists)
    assert '"maxItems": 5' in text  # the planner's own bound on its aspects
    assert response_format(BlindOutput, "json_object") == {"type": "json_object"}
    assert response_format(BlindOutput, "none") is None
    assert response_format(None, "json_schema") is None  # text tasks send none
    # pydantic still validates what strict mode cannot say (bounds removed from the schema)
    assert strict_schema({"type": "string", "maxLength": 3}, "json_schema") == {"type": "string"}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_round_trips_through_the_simulator_with_its_own_cache_key(
    mode, sim_url, tmp_path
):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    llm = LLM(ModelConfig(base_url=sim_url, structured_output=mode), cache)
    planner = load_prompt("planner")
    profile = [{"id": "u-p1", "category": "x", "text": "I only have ten minutes a day."}]

    async def go():
        try:
            variables = {"profile": profile, "question": "How to run?"}
            return await llm.call(planner, stage="rubrics", model="prb-sim-1", variables=variables)
        finally:
            await llm.aclose()

    result = asyncio.run(go())
    assert result.value.rubric_aspects and not result.cached
    entry = cache.lookup(result.key)
    assert entry["request"]["params"].get("response_format") == response_format(PlannerOutput, mode)
    other = LLM(ModelConfig(base_url=sim_url, structured_output="none"), cache)
    messages = planner.render(profile=profile, question="How to run?")
    assert (other.key_for(planner, "prb-sim-1", messages, 0) == result.key) == (mode == "none")


@pytest.mark.parametrize(
    ("fmt", "message"),
    [
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "X",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "required": ["a"],
                    },
                },
            },
            "'additionalProperties' is required",
        ),
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "X",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                        "additionalProperties": False,
                        "required": [],
                    },
                },
            },
            "Missing 'a'",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "bad name", "schema": {}}},
            "json_schema.name",
        ),
        ({"type": "json_object", "schema": "not an object"}, "response_format.schema"),
        ({"type": "grammar"}, "Supported values are"),
    ],
    ids=["open-object", "not-required", "bad-name", "schema-not-object", "unknown-type"],
)
def test_the_simulator_refuses_a_malformed_response_format_as_openai_does(fmt, message, sim_url):
    body = {
        "model": "prb-sim-1",
        "messages": [{"role": "user", "content": "Hi"}],
        "response_format": fmt,
    }
    answer = httpx.post(f"{sim_url}/chat/completions", json=body, timeout=10)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert message in error["message"] and error["param"] == "response_format"


def test_the_mode_is_recorded_in_the_manifest_and_a_build_runs_in_each(tmp_path, sim_url):
    for mode in ("json_object_schema", "none"):
        config = write_config(
            tmp_path / mode,
            sim_url,
            personas={"per_category": 1},
            model={"structured_output": mode},
        )
        result = build(config)
        manifest = json.loads((tmp_path / mode / "outputs/demo/release/manifest.json").read_text())
        assert manifest["config"]["model"]["structured_output"] == mode
        assert result["funnel"]["released"] > 0


def test_every_json_task_schema_compiles_to_a_llama_cpp_grammar():
    """llama.cpp's server answers a schema its converter cannot compile (an unanchored pattern,
    say) with unconstrained JSON and no error: found on the real model, where the planner's
    evidence pattern made every rubric free-form. Compile each schema as the server would."""
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    from pipeline.llm.prompts import all_prompts

    outputs = {t.output for t in all_prompts().values() if t.output is not None}
    assert PlannerOutput in outputs and len(outputs) >= 5
    for output in outputs:
        schema = response_format(output, "json_object_schema")["schema"]
        assert grammar.json_schema_to_gbnf(json.dumps(schema)), output.__name__


def test_the_evidence_pattern_cannot_swallow_the_end_of_its_string():
    """A grammar's `.` matches `"`: the real model closed the evidence string early and went on
    writing keys inside it. The pattern keeps quotes out and still takes a cited quote."""
    import re

    pattern = PlannerOutput.model_json_schema()["$defs"]["RubricAspect"]["properties"]["evidence"][
        "pattern"
    ]
    assert re.match(pattern, "[u1-p3] 'only ten minutes a day'")
    assert not re.match(pattern, '[u1-p3] quote", "reason": "injected')
    assert not re.match(pattern, "no id first")
