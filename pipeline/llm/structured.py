"""Structured output: the `response_format` a JSON task sends in each `model.structured_output`
mode, the schema transform each endpoint accepts, and parsing an answer into its model."""

from __future__ import annotations

import functools
import json
import re

from pydantic import BaseModel, ValidationError

from pipeline.calls import Unparseable

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


def parse_output(content: str, schema: type[BaseModel] | None) -> BaseModel | str:
    if schema is None:
        text = content.strip()
        if not text:
            raise Unparseable("empty answer")
        return text
    try:
        # strict=False: a raw newline inside a string (small models under a grammar write them)
        # is read as one; what the answer says is then validated by the schema
        return schema.model_validate(json.loads(_FENCE.sub("", content.strip()), strict=False))
    except (json.JSONDecodeError, ValidationError) as e:
        raise Unparseable(f"{schema.__name__}: {str(e).splitlines()[0][:200]}") from None


# How a JSON task's output schema is sent (`model.structured_output`), by endpoint:
STRUCTURED = {
    "json_schema": "OpenAI / vLLM: response_format json_schema, strict, every field required",
    "json_object_schema": "llama.cpp server: response_format json_object with the schema "
    "(grammar-constrained; strings and lists bounded so a small model cannot run on)",
    "json_object": "JSON mode only (Ollama and others): valid JSON, the schema in the prompt",
    "none": "no response_format: the schema in the prompt only",
}
STRICT_DROP = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "format",
    "default",
)
BOUND_STRING, BOUND_ITEMS = 240, 8  # grammar bounds where the model schema sets none


def strict_schema(schema: dict, mode: str) -> dict:
    """A pydantic JSON schema in the form structured output accepts: every object closed
    (`additionalProperties: false`) with every property required; for OpenAI's strict mode the
    keywords it rejects removed (pydantic still validates them on the answer); for a grammar
    (llama.cpp) every string and list given an upper bound."""

    def fix(node):
        if isinstance(node, list):
            return [fix(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {
            k: fix(v) for k, v in node.items() if not (mode == "json_schema" and k in STRICT_DROP)
        }
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        if mode == "json_object_schema":
            if out.get("type") == "string":
                out.setdefault("maxLength", BOUND_STRING)
            if out.get("type") == "array":
                out.setdefault("maxItems", BOUND_ITEMS)
            lo, hi = out.get("minimum"), out.get("maximum")
            if out.get("type") == "integer" and lo is not None and hi is not None and hi - lo < 20:
                out["enum"] = list(range(int(lo), int(hi) + 1))  # a grammar keeps to an enum
        return out

    return fix(schema)


def response_format(output: type[BaseModel] | None, mode: str) -> dict | None:
    """The `response_format` a JSON task sends in `mode` (None for text tasks and mode none)."""
    if output is None or mode == "none":
        return None
    if mode == "json_object":
        return {"type": "json_object"}
    schema = strict_schema(output.model_json_schema(), mode)
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    return {
        "type": "json_schema",
        "json_schema": {"name": output.__name__, "schema": schema, "strict": True},
    }


@functools.lru_cache(maxsize=64)
def cached_response_format(output: type[BaseModel] | None, mode: str) -> dict | None:
    return response_format(output, mode)  # the schema transform once per output model
